"""ColumnParallelLinear and RowParallelLinear compute what the unsplit Linear computes
(float64, forward and backward, at any number of ranks)."""
import numpy as np
import pytest

from hpcdist import nn
from hpcdist.exceptions import InvalidArgumentError
from tests.helpers import all_ranks, check_array, expect_error, mpi_twin

TOL = {"rtol": 1e-12, "atol": 1e-13}


def data(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape)


def layer_and_linear(cls, n_in, n_out, seed, ctx, **options):
    """A tensor-parallel layer and the Linear it splits."""
    return (cls(n_in, n_out, dtype=np.float64, random_state=seed, ctx=ctx, **options),
            nn.Linear(n_in, n_out, dtype=np.float64, random_state=seed))


# kind: (layer, option, whose features are split: "out" or "in", is the split side local?)
CASES = {
    "column": (nn.ColumnParallelLinear, {"gather_output": False}, "out", True),
    "column, gathered output": (nn.ColumnParallelLinear, {"gather_output": True}, "out", False),
    "row": (nn.RowParallelLinear, {"input_is_parallel": True}, "in", True),
    "row, whole input": (nn.RowParallelLinear, {"input_is_parallel": False}, "in", False),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_split_layer_equals_linear(ctx, kind):
    cls, options, split, local = CASES[kind]
    x, g = data(6, 9), data(6, 7, seed=1)
    layer, reference = layer_and_linear(cls, 9, 7, 3, ctx, **options)
    block = layer.block
    whole = slice(None)
    out_block = block if split == "out" and local else whole
    in_block = block if split == "in" and local else whole
    out = layer.forward(x[:, in_block])
    grad_input = layer.backward(g[:, out_block])
    expected, expected_grad = reference.forward(x), reference.backward(g)
    weight_block = (block, whole) if split == "out" else (whole, block)
    with all_ranks(kind):
        check_array(out, expected[:, out_block], **TOL)
        check_array(grad_input, expected_grad[:, in_block], **TOL)
        check_array(layer.weight.grad, reference.weight.grad[weight_block], **TOL)
        check_array(layer.bias.grad, reference.bias.grad[weight_block[0]], **TOL)


test_split_layer_equals_linear_mpi = mpi_twin(test_split_layer_equals_linear)


def test_megatron_mlp_equals_linear_layers(ctx):
    """Column -> Tanh -> Row: one allreduce forward, one backward, like two Linears."""
    x, g = data(8, 5), data(8, 3, seed=2)
    mlp = nn.Sequential(nn.ColumnParallelLinear(5, 11, dtype=np.float64, random_state=1,
                                                ctx=ctx),
                        nn.Tanh(),
                        nn.RowParallelLinear(11, 3, dtype=np.float64, random_state=2, ctx=ctx))
    reference = nn.Sequential(nn.Linear(5, 11, dtype=np.float64, random_state=1), nn.Tanh(),
                              nn.Linear(11, 3, dtype=np.float64, random_state=2))
    ctx.reset_stats()
    out = mlp.forward(x)
    grad_input = mlp.backward(g)
    calls = ctx.stats().get("allreduce", {}).get("calls", 0)
    expected, expected_grad = reference.forward(x), reference.backward(g)
    column, row = mlp[0].block, mlp[2].block
    with all_ranks("tensor-parallel MLP"):
        check_array(out, expected, **TOL)
        check_array(grad_input, expected_grad, **TOL)
        check_array(mlp[0].weight.grad, reference[0].weight.grad[column], **TOL)
        check_array(mlp[2].weight.grad, reference[2].weight.grad[:, row], **TOL)
        assert calls == (2 if ctx.size > 1 else 0), calls


test_megatron_mlp_equals_linear_layers_mpi = mpi_twin(test_megatron_mlp_equals_linear_layers)


def test_wrong_input_width(ctx):
    layer = nn.RowParallelLinear(9, 4, dtype=np.float64, ctx=ctx)
    expect_error(InvalidArgumentError, layer.forward, data(2, 9 + 1),
                 match="last dimension must be")
    expect_error(InvalidArgumentError, nn.ColumnParallelLinear, 0, 4, ctx=ctx,
                 match="in_features=0")


test_wrong_input_width_mpi = mpi_twin(test_wrong_input_width)
