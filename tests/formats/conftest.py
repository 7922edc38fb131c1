"""Shared paths for the formats tests. Reference databases are copied to a temporary folder before they are
opened: SQLite creates -wal/-shm files beside a WAL database it reads, and the fixtures must stay untouched."""
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REF = FIXTURES / "msprobe-26.2.0"
OWN = FIXTURES / "formats"
REF_DUMPS = sorted(REF.glob("inputs/*/step*/rank*/dump.json")) + sorted(REF.glob("collector/*/dump.json")) + sorted(
    REF.glob("outputs/merge_json/step*/rank*/dump.json")
)
REF_DBS = sorted(REF.glob("outputs/*/*.vis.db"))


@pytest.fixture(scope="session")
def ref_db_copies(tmp_path_factory):
    """{case name: path of a private copy of outputs/<case>/*.vis.db}"""
    root = tmp_path_factory.mktemp("ref_dbs")
    out = {}
    for db in REF_DBS:
        dst = root / db.parent.name / db.name
        dst.parent.mkdir()
        shutil.copy2(db, dst)
        out[db.parent.name] = dst
    return out
