"""What the browser downloads of the web client: the files without their whole-line comments (hosting._body, read
by the local server and the deploy alike), still the same code."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from chalicelib import hosting


def test_without_comments__whole_line_comments_and_blank_lines_left_out__code_untouched() -> None:
    source = "\n".join([
        "// a line comment",
        "/** a block",
        " * over lines */",
        "const url = \"https://example.org//path\"; // after code: kept",
        "",
        "   /* one line */",
        "/* ends mid-line */ const b = 2;",
        "  if (x) {",
        "    y(); /* kept */",
        "  }",
    ])
    assert hosting.without_comments(source) == "\n".join([
        "const url = \"https://example.org//path\"; // after code: kept",
        "const b = 2;",
        "  if (x) {",
        "    y(); /* kept */",
        "  }",
    ]) + "\n"


def test_without_comments__css__block_comments_only() -> None:
    css = "/* frame */\n.a { color: red; } /* kept */\n\n.b::before { content: \"//\"; }\n"
    served = hosting.without_comments(css, line_comments=False)
    assert served == ".a { color: red; } /* kept */\n.b::before { content: \"//\"; }\n"


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


def test_served_scripts__template_literals_kept_exactly() -> None:
    served = hosting._body("views.js", hosting.ASSET_PREFIX).decode()
    assert "`all ${n} questions`" in served
