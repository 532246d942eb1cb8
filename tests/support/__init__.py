"""Test support: deterministic fakes and the crash-point harness's store proxy."""
