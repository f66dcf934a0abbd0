"""helpers.batch: memory against batch size, the affine law, the largest batch, PeakCurve."""

import pytest

from helpers import DoesNotFit, GiB, PeakCurve, fit_affine, profile_step
from helpers.batch import Estimate, model_state_estimate


@pytest.fixture(scope="module")
def resnet_curve():
    return PeakCurve("resnet18", "simulated")


def test_affine_law_resnet18(resnet_curve):
    sizes = [128, 256, 512]
    traces = [resnet_curve.trace(b) for b in sizes]
    fit = fit_affine(sizes, [t.peak_allocated_bytes for t in traces])
    assert fit.max_residual_bytes < 4096  # a straight line, up to 512-byte rounding
    at_peak = traces[0].categories
    model_state = at_peak["parameters"] + at_peak["gradients"] + at_peak["optimizer_states"]
    assert abs(fit.m0_bytes - model_state) < 64 * 1024  # M0: the model state alive at the peak
    per_sample = (at_peak["input"] + at_peak["activations"] + at_peak["other"]) / 128
    assert fit.per_sample_bytes == pytest.approx(per_sample, rel=1e-4)  # m: activations per sample
    # Below the straight-line regime the peak sits elsewhere and lies above the line.
    small = resnet_curve.trace(1)
    assert small.peak_allocation != traces[0].peak_allocation
    assert small.peak_allocated_bytes > fit.predict(1)


def test_largest_batch_is_where_the_simulated_gpu_runs_out(resnet_curve):
    sizes = [256, 512]
    fit = fit_affine(sizes, [resnet_curve.trace(b).peak_allocated_bytes for b in sizes])
    largest = fit.largest_batch(16 * GiB)
    assert largest > 600
    profile_step("resnet18", largest, device="simulated", steady_state=True, capacity=16 * GiB)
    with pytest.raises(DoesNotFit, match="Simulated CUDA out of memory"):
        profile_step("resnet18", largest + 1, device="simulated", steady_state=True, capacity=16 * GiB)


def test_fit_affine_refuses_bad_input():
    with pytest.raises(ValueError, match="two different"):
        fit_affine([4, 4], [1, 2])
    with pytest.raises(ValueError, match="batch sizes but"):
        fit_affine([1, 2], [1])
    assert fit_affine([1, 2, 3], [10, 12, 14]).largest_batch(100, overhead=0) == 46  # 8 + 46 * 2 = 100


def test_peak_curve_interpolates_exactly(resnet_curve):
    resnet_curve.trace(128)
    resnet_curve.trace(1024)
    for b in (200, 777):
        estimate = resnet_curve.estimate(b)
        assert not estimate.traced
        direct = profile_step("resnet18", b, device="simulated", steady_state=True)
        assert abs(estimate.peak_bytes - direct.peak_allocated_bytes) < 4096
        for name, nbytes in direct.categories.items():
            assert abs(estimate.categories[name] - nbytes) < 4096, name
        assert estimate.where == "backward of ReLU 'layer4.1.relu'"
    with pytest.raises(ValueError, match="batch_size"):
        resnet_curve.estimate(0)


def test_peak_curve_takes_a_whole_config_and_checks_options():
    from helpers import StepConfig

    curve = PeakCurve(StepConfig(model="mlp", device="simulated", steady_state=True))
    assert isinstance(curve.estimate(4), Estimate) and curve.config.steady_state
    with pytest.raises(ValueError, match="unknown optimizer"):
        PeakCurve("resnet18", "simulated", optimizer="lion")


def test_model_state_estimate_is_the_formula():
    e = model_state_estimate(1000, "adam")
    assert e.peak_bytes == 20 * 1000 and e.categories == {"parameters": 4000, "gradients": 4000,
                                                          "optimizer_states": 8000, "other": 4000}
    assert model_state_estimate(1000, "adam", fused=True).peak_bytes == 16 * 1000
    assert model_state_estimate(1000, "sgd").peak_bytes == 8 * 1000 and e.backend == "formula"
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        model_state_estimate(1000, "lion")
    with pytest.raises(ValueError, match="parameters must be an integer >= 1"):
        model_state_estimate(0, "adam")
