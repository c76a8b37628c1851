"""carm_advisor.files: result JSON plain, xz- or gzip-compressed; the stdlib's codecs are the reference."""
import gzip
import json
import lzma

import pytest

from carm_advisor.files import read_json, write_text

DOC = {"validation": {"n": 3, "power_median_abs_err": 0.112}, "layers": {"rows": [{"name": "block1_conv1"}]}}


def test_each_suffix_is_read_with_its_codec(tmp_path):
    text = json.dumps(DOC)
    (tmp_path / "a.json").write_text(text)
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "a.json.xz").write_bytes(lzma.compress(text.encode()))
    for name in ("a.json", "a.json.gz", "a.json.xz"):
        assert read_json(tmp_path / name) == DOC


def test_write_text_compresses_an_xz_name_and_leaves_others_plain(tmp_path):
    text = json.dumps(DOC)
    xz = write_text(tmp_path / "sub" / "b.json.xz", text)          # the folder is made
    assert lzma.decompress(xz.read_bytes()).decode() == text
    plain = write_text(tmp_path / "b.json", text)
    assert plain.read_text() == text
    # the same text twice gives the same bytes (xz stores no time stamp): a re-run leaves git nothing to commit
    assert write_text(tmp_path / "c.json.xz", text).read_bytes() == xz.read_bytes()


def test_a_bad_file_raises_oserror_or_valueerror_the_callers_catch(tmp_path):
    (tmp_path / "bad.json.xz").write_bytes(b"not xz")
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not xz data"):
        read_json(tmp_path / "bad.json.xz")
    with pytest.raises(OSError):
        read_json(tmp_path / "bad.json.gz")
    with pytest.raises(ValueError):
        read_json(tmp_path / "bad.json")
    with pytest.raises(OSError):
        read_json(tmp_path / "missing.json.xz")
