"""The repository root, for tests that read docs/, scripts/ or examples."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
