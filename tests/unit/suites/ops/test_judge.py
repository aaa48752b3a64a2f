"""The ops judge: the numerics rule per output, invariants, exact integers, tied indices."""

from __future__ import annotations

import torch

from trainready.suites.ops.judge import judge_sample


def runs(fn, dtype=torch.float32, n=256, seed=0):
    """(reference in float64, the CPU's result at `dtype`) of fn on one random input."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return fn(x.double()), fn(x), x


def softplus(x):
    return torch.nn.functional.softplus(x).cumsum(0)


def test_the_cpus_own_result_passes_and_an_error_of_1pct_fails_naming_the_output():
    ref, cpu, _ = runs(softplus)
    assert judge_sample([ref], [cpu], [cpu.clone()], "fp32").ok
    bad = judge_sample([ref], [cpu], [cpu * 1.01], "fp32")
    assert not bad.ok and bad.worst == "out[0]" and bad.over > 1 and "rmse" in bad.problem


def test_bf16_error_at_twice_the_noise_passes_and_at_ten_times_fails():
    ref, cpu, _ = runs(softplus, torch.bfloat16)
    noise = cpu.double() - ref
    assert judge_sample([ref], [cpu], [(ref + 1.5 * noise).bfloat16()], "bf16").ok
    assert not judge_sample([ref], [cpu], [(ref + 10 * noise).bfloat16()], "bf16").ok


def test_a_result_closer_to_float64_than_the_cpu_passes_and_says_so():
    ref, cpu, _ = runs(softplus, torch.bfloat16)
    better = judge_sample([ref], [cpu], [ref.bfloat16()], "bf16")
    assert better.ok and better.closer
    assert not judge_sample([ref], [cpu], [cpu], "bf16").closer  # equal is not closer


def test_shape_dtype_and_count_are_invariants():
    ref, cpu, _ = runs(softplus)
    assert "shape" in judge_sample([ref], [cpu], [cpu[:-1]], "fp32").problem
    assert "dtype" in judge_sample([ref], [cpu], [cpu.double()], "fp32").problem
    assert not judge_sample([ref], [cpu], [cpu, cpu], "fp32").ok


def test_invariants_only_ignores_values():
    ref, cpu, _ = runs(softplus)
    assert judge_sample([ref], [cpu], [cpu * 3], "fp32", how="invariants").ok


def test_integer_outputs_are_exact_unless_they_are_tied_indices():
    idx = torch.tensor([0, 1, 2, 3])
    other = torch.tensor([0, 1, 3, 3])
    assert judge_sample([idx], [idx], [idx.clone()], "fp32").ok
    wrong = judge_sample([idx], [idx], [other], "fp32")
    assert not wrong.ok and "1 of 4 entries differ" in wrong.problem
    assert judge_sample([idx], [idx], [other], "fp32", tied_indices=True).ok


def test_where_the_cpu_overflows_the_device_must_match_the_cpu_not_float64():
    x = torch.tensor([1.0, 2.0, 1e30, 3.0] * 32)
    ref, cpu = (x.double() ** 2), (x**2)  # fp32 overflows at 1e60; float64 does not
    assert torch.isinf(cpu).any() and torch.isfinite(ref).all()
    assert judge_sample([ref], [cpu], [cpu.clone()], "fp32").ok
    finite = cpu.clone()
    finite[torch.isinf(finite)] = 0.0
    assert not judge_sample([ref], [cpu], [finite], "fp32").ok


def test_fp64_noise_is_the_cpus_fp32_noise_scaled_to_fp64():
    ref, _, x = runs(softplus, torch.float64)
    fp32 = softplus(x.float())
    ok = judge_sample([ref], [ref], [ref.clone()], "fp64", fp32=[fp32])
    assert ok.ok and ok.rule == "noise_vs_cpu_fp32_scaled"
    assert not judge_sample([ref], [ref], [ref * (1 + 1e-9)], "fp64", fp32=[fp32]).ok


def test_where_the_cpu_overflows_a_device_keeping_float64s_value_passes_and_a_wrong_one_fails():
    x = torch.tensor([1.0, 2.0, 300.0, 3.0] * 32)

    def square_over(t):
        return t * t / t  # fp16's intermediate 90,000 overflows; the result fits

    ref, cpu = square_over(x.double()), square_over(x.half())
    assert torch.isinf(cpu).any() and torch.isfinite(ref).all()
    kept = ref.half()  # more range than the CPU: float64's value, finite, in fp16
    better = judge_sample([ref], [cpu], [kept], "fp16")
    assert better.ok
    wrong = kept.clone()
    wrong[2] = 450.0  # finite where the CPU overflowed, but not float64's value
    assert not judge_sample([ref], [cpu], [wrong], "fp16").ok
    assert judge_sample([ref], [cpu], [cpu.clone()], "fp16").ok  # the CPU's own inf still passes


def test_fp64_noise_counts_the_cpus_own_distance_where_the_sample_held_fp32_tensors():
    ref, _, x = runs(softplus, torch.float64)
    fp32 = softplus(x.float())
    cpu = ref + (fp32.double() - ref)  # the fp64 run read an fp32 weight: fp32-sized error
    same = judge_sample([ref], [cpu], [cpu.clone()], "fp64", fp32=[fp32])
    assert same.ok and same.rule == "noise_vs_cpu"
    assert not judge_sample([ref], [cpu], [ref + 10 * (cpu - ref)], "fp64", fp32=[fp32]).ok
