"""A straight line through measured points: peak memory against batch size, for the search's
ladder (where the next rung fits) and for the table-driven runner (what a setup would use)."""

from __future__ import annotations

from collections.abc import Iterable


def memory_line(points: Iterable[tuple[float, float]]) -> tuple[float, float] | None:
    """``(fixed, per_sample)`` of the least-squares line through ``(batch, megabytes)`` points;
    through the origin from points at one batch size (memory in proportion to the batch, which
    overstates the growth); None without points."""
    pairs = [(float(x), float(y)) for x, y in points]
    if not pairs:
        return None
    xs = [x for x, _ in pairs]
    my = sum(y for _, y in pairs) / len(pairs)
    if len(set(xs)) == 1:
        return 0.0, my / xs[0]
    mx = sum(xs) / len(xs)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in pairs) / sxx
    return my - slope * mx, slope
