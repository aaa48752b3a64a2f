"""A fake GEMM on a fake clock, for the rule readings follow (`trainready/device/settle.py`): each
product takes `product_s` divided by the machine's speed at that moment, planted per product
(`first`: a slow first few calls, as setup makes them) or per stretch of the fake clock (`slow`: a
busy neighbour, a sustained slowdown). Nothing sleeps: tests never time the real machine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class FakeGemm:
    product_s: float = 0.0006  # a warm 512³ bf16 product on 2 quiet CPU cores: ~450 GFLOP/s
    first: Sequence[float] = ()  # the first calls' times, as multiples of product_s (cold: 30)
    # (start, end, speed): between these fake-clock seconds the machine runs at `speed` (0.5: half)
    slow: Sequence[tuple[float, float, float]] = ()
    now_s: float = 0.0
    calls: int = 0
    durations: list[float] = field(default_factory=list)  # every `timed` call's seconds

    def speed(self, t: float) -> float:
        return next((s for a, b, s in self.slow if a <= t < b), 1.0)

    def product(self) -> None:
        """One product: the fake clock moves on by its time."""
        cold = self.first[self.calls] if self.calls < len(self.first) else 1.0
        self.now_s += self.product_s * cold / self.speed(self.now_s)
        self.calls += 1

    def timed(self, count: int) -> float:
        """`settle.Timed`: `count` back-to-back products, their seconds on the fake clock."""
        t0 = self.now_s
        for _ in range(count):
            self.product()
        self.durations.append(self.now_s - t0)
        return self.durations[-1]

    def now(self) -> float:
        return self.now_s


@dataclass
class SizedGemm:
    """`peak._time_matmuls` on a fake clock: an n³ product takes 2n³ / `rate` seconds divided by
    the machine's speed then; the first call at each size `cold` times that (setup)."""

    rate: float = 1e12  # FLOP/s
    cold: float = 30.0
    slow: Sequence[tuple[float, float, float]] = ()  # (start, end, speed) on the fake clock
    # size -> FLOP/s where a size runs at another rate than `rate`
    rates: dict[int, float] = field(default_factory=dict)
    now_s: float = 0.0
    calls: dict[int, int] = field(default_factory=dict)

    def speed(self, t: float) -> float:
        return next((s for a, b, s in self.slow if a <= t < b), 1.0)

    def __call__(self, a, b, out, count: int, clock) -> float:  # noqa: ANN001, ARG002
        n = a.shape[0]
        t0 = self.now_s
        for _ in range(count):
            cold = self.cold if self.calls.get(n, 0) == 0 else 1.0
            self.calls[n] = self.calls.get(n, 0) + 1
            self.now_s += 2.0 * n**3 / self.rates.get(n, self.rate) * cold / self.speed(self.now_s)
        return self.now_s - t0
