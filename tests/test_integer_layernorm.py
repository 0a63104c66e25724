"""P13: LayerNorm in the form npuport quantises for Ethos-U (ethosu_quant.integer_form). Exact in float; on the TOSA
reference model at int16 it keeps what the plain form loses when a residual stream has outlier channels (the plain
form's rsqrt is a 513-point table across the variance's whole range; benchmarks/ethosu_localise.py found it on the
demo detector)."""

import pytest
import torch
from conftest import needs_ethos_u

from npuport.runtimes.ethosu_quant import integer_form, module_groups


class Block(torch.nn.Module):
    def __init__(self, c: int = 32, bias: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.LayerNorm(c, bias=bias)
        self.rms = torch.nn.RMSNorm(c)
        self.head = torch.nn.Linear(c, 2)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x, mask):  # (B, T, C), (B, T)
        return self.head(self.norm(x) * mask.unsqueeze(-1)).mean(1)


def outlier_rows(n: int, t: int = 16, c: int = 32, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Tokens whose channel 0 ranges from nothing to 300x the others: variances from about 1 to about 3000."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        x = torch.randn(1, t, c, generator=g)
        x[:, :, 0] += 300 * torch.rand(1, t, generator=g) * (torch.rand(1, t, generator=g) < 0.3)
        rows.append((x, torch.ones(1, t)))
    return rows


@pytest.mark.parametrize("bias", [True, False])
def test_the_integer_form_is_layernorm(bias):
    m = Block(bias=bias)
    w = m.norm.weight.clone()
    f = integer_form(m)
    assert type(f.norm).__name__ == "ScaledLayerNorm" and isinstance(m.norm, torch.nn.LayerNorm)  # original kept
    assert isinstance(f.rms, torch.nn.RMSNorm)  # only LayerNorm changes form
    assert f.norm.weight is m.norm.weight and torch.equal(m.norm.weight, w)  # weights shared, not copied
    assert "layernorm" in module_groups(f)  # --int16 layernorm still names it
    for x, mask in outlier_rows(4) + [(torch.zeros(1, 4, 32), torch.ones(1, 4))]:  # a constant row: no NaN
        torch.testing.assert_close(f(x, mask), m(x, mask), rtol=1e-5, atol=1e-5)
        assert torch.isfinite(f(x, mask)).all()


@needs_ethos_u()
def test_int16_layernorm_on_the_reference_model_holds_with_the_integer_form(tmp_path):
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from npuport.runtimes.ethosu import _vela_parts
    from npuport.runtimes.ethosu_debug import Lowered
    from npuport.runtimes.ethosu_quant import compile_spec, quantize, quiet

    m, calib, rows = Block(), outlier_rows(16, seed=1), outlier_rows(8, seed=2)
    spec = compile_spec("ethos-u55-128")

    def error(scaled: bool) -> float:
        def export(mod, ex):
            return torch.export.export(mod, tuple(ex), strict=True)

        with quiet():
            qm = quantize(export, m, calib[0], calib, spec, "int16", scaled_layernorm=scaled)
            with _vela_parts(tmp_path / str(scaled)) as parts:
                edge = to_edge_transform_and_lower(export(qm, calib[0]), partitioner=[EthosUPartitioner(spec)])
        low = Lowered(edge, parts)
        assert low.modules  # the LayerNorm reached the NPU
        with torch.no_grad():
            return max(float((low.run(x, mask, on_reference="all")[0] - m(x, mask)).abs().max()) for x, mask in rows)

    plain, scaled = error(False), error(True)
    # measured here: plain 0.92, scaled 1.8e-3 (max abs error of outputs about 1 in size)
    assert scaled < 0.01 and scaled * 20 < plain, (plain, scaled)
