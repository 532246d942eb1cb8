"""What the browser downloads of the web client: the files minified (hosting._body, read by the local server and
the deploy alike), still the same code, licence comments kept."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from chalicelib import hosting


def test_served_scripts__every_file_still_parses_and_is_smaller(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "node is not installed (.ci/run installs Debian's nodejs)"
    for name in hosting.client_files():
        if not name.endswith(".js"):
            continue
        served = hosting._body(name, hosting.ASSET_PREFIX)
        assert len(served) < len((hosting.WEB_ROOT / name).read_bytes()), name
        module = tmp_path / (name[:-3] + ".mjs")
        module.write_bytes(served)
        result = subprocess.run([node, "--check", str(module)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{name} as served does not parse:\n{result.stderr[-2000:]}"


def test_served_files__licence_comment_kept() -> None:
    served = hosting._body("morphdom.js", hosting.ASSET_PREFIX).decode()
    assert served.startswith("/*! morphdom 2.7.8") and "The MIT License" in served
