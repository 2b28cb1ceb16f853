"""python/gpushim/_api.py's ``fmt_bytes``: the same figure as the collector's ``fmt_bytes``
(collector/src/report/words.rs, whose tests hold the same cases) and the HTML page's
``toFixed(1)``, half-way tenths rounded up."""

from gpushim._api import fmt_bytes


def test_sizes_print_as_the_collector_prints_them():
    assert fmt_bytes(0) == "0 B"
    assert fmt_bytes(1023) == "1023 B"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_bytes(14 << 20) == "14.0 MiB"
    assert fmt_bytes(3 << 30) == "3.0 GiB"
    assert fmt_bytes((232 << 20) + (256 << 10)) == "232.3 MiB"
    assert fmt_bytes(1280) == "1.3 KiB"
    assert fmt_bytes((1 << 20) + 52428) == "1.0 MiB"
    assert fmt_bytes(5 << 40) == "5.0 TiB"
    assert fmt_bytes(-(3 << 20)) == "-3.0 MiB"
