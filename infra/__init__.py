"""Deployment infrastructure: turns `chalice package` output into the one deployable template.

Everything here derives from the code (PynamoDB models, Chalice handlers), so the template cannot drift
from what the app expects. Runtime code never imports this package.
"""
