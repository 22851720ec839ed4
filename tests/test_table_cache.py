"""The disk cache of the scheduler's tables: what is read back is exactly what was built, and a
change of any input (arguments, code) or a corrupt file means building again."""

from __future__ import annotations

import numpy as np
import pytest

from infersim import scheduler, table_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(table_cache.ENV, str(tmp_path))
    return tmp_path


def _counting(build):
    calls = []

    def run(*args):
        calls.append(args)
        return build(*args)
    return run, calls


ISL = ((100.0, 1000.0, 3000.0), (0.5, 0.3, 0.2))


def test_read_back_is_bit_identical_and_not_rebuilt(cache):
    build, calls = _counting(scheduler._build_capped_table)
    first = table_cache.persisted("capped", build, *ISL, 4)
    second = table_cache.persisted("capped", build, *ISL, 4)
    assert len(calls) == 1 and len(list(cache.rglob("capped-*.npz"))) == 1
    fresh = scheduler._build_capped_table(*ISL, 4)
    for a, b, c in zip(first, second, fresh):
        assert np.array_equal(a, c, equal_nan=True) and np.array_equal(b, c, equal_nan=True)
    build, calls = _counting(scheduler._build_busiest_table)
    one, two = (table_cache.persisted("busiest", build, *ISL, 8) for _ in range(2))
    assert len(calls) == 1
    assert isinstance(two[3], float) and two[3] == one[3]  # scalars come back as floats
    assert all(np.array_equal(a, b) for a, b in zip(one[:3], two[:3]))
    sizes = (1, 2, 4, 8, 16, 64, 256)
    scheduler._padded_table.cache_clear()
    for _ in range(2):  # built, then read back: the same padded rows
        assert np.array_equal(scheduler._padded_table(sizes, 4), scheduler._padded_exact(sizes, scheduler.PAD_AXIS, 4))
        scheduler._padded_table.cache_clear()
    assert len(list(cache.rglob("padded-*.npz"))) == 1


def test_other_arguments_or_code_miss(cache, monkeypatch):
    build, calls = _counting(scheduler._build_busiest_table)
    table_cache.persisted("busiest", build, *ISL, 2)
    table_cache.persisted("busiest", build, *ISL, 4)
    table_cache.persisted("busiest", build, (100.0, 1000.0, 3000.0), (0.5, 0.2, 0.3), 2)
    assert len(calls) == 3
    key = table_cache.digest("busiest", (*ISL, 2))
    monkeypatch.setattr(table_cache, "_code_digest", lambda: b"other code")
    assert table_cache.digest("busiest", (*ISL, 2)) != key


def test_corrupt_file_is_rebuilt(cache):
    build, calls = _counting(scheduler._build_busiest_table)
    want = table_cache.persisted("busiest", build, *ISL, 2)
    (path,) = cache.rglob("busiest-*.npz")
    path.write_bytes(b"not a table")
    got = table_cache.persisted("busiest", build, *ISL, 2)
    assert len(calls) == 2 and all(np.array_equal(a, b) for a, b in zip(want[:3], got[:3]))


def test_off_builds_every_time_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(table_cache.ENV, "off")
    build, calls = _counting(scheduler._build_busiest_table)
    for _ in range(2):
        table_cache.persisted("busiest", build, *ISL, 2)
    assert len(calls) == 2 and table_cache.cache_dir() is None
