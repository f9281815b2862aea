"""A two-layer description ([[layers]]) is refused by today's one-layer engine with one
line naming the field and where the closure statement is: exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from meanfield.core.errors import ConfigError
from meanfield.engine.description import description_from_dict

ROOT = Path(__file__).resolve().parents[1]


def test_layers_key_refused_in_python():
    raw = {"dictionary": {"features": ["a", "b"]}, "heads": [{"value": "linear"}], "layers": [{"heads": 1}],
           "data": {"rows": [{"tokens": ["a", "b"], "target": 1}]}}
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    msg = str(e.value)
    assert msg.startswith("layers:") and "docs/engine.md" in msg and "\n" not in msg


def test_layers_key_refused_on_the_command_line(tmp_path):
    src = (ROOT / "docs" / "examples" / "majority.toml").read_text(encoding="utf-8")
    desc = tmp_path / "two.toml"
    desc.write_text(src + "\n[[layers]]\nheads = 1\n", encoding="utf-8")
    out = tmp_path / "run.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(desc), "--out", str(out)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "layers:" in lines[0] and "Traceback" not in r.stderr
    assert not out.exists()
