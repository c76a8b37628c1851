"""report.units: figures as text."""


def test_a_count_of_samples_has_no_milli_or_micro_prefix():
    from carm_advisor.units import count

    assert [count(v) for v in (0.612, 0.00123, 45.34, 999.4, 1500, 9.05e7, None)] == \
        ["0.612", "0.00123", "45.3", "999", "1.5 k", "90.5 M", "-"]
