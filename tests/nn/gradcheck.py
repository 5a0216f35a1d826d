"""Central finite differences against a module's analytic backward.

The scalar checked is ``f = sum(forward(x, *args) * w)`` for fixed random
weights ``w`` (a scalar weight when the output is a scalar, as for losses):
``backward(w)`` must return df/dx, and every parameter's accumulated
``grad`` must be df/dparameter. Use float64 modules and inputs.
"""
import numpy as np

__all__ = ["gradcheck", "numerical_grad"]


def _objective(forward, x, args, weights):
    return float(np.sum(np.asarray(forward(x, *args), dtype=np.float64) * weights))


def numerical_grad(f, array, *, eps=1e-6, indices=None):
    """Central differences of ``f()`` with respect to entries of ``array``
    (perturbed in place and restored). Returns an array of ``array``'s shape,
    NaN where an entry was not checked."""
    grad = np.full(array.shape, np.nan)
    for index in (np.ndindex(array.shape) if indices is None else indices):
        original = array[index]
        array[index] = original + eps
        plus = f()
        array[index] = original - eps
        minus = f()
        array[index] = original
        grad[index] = (plus - minus) / (2 * eps)
    return grad


def _indices(shape, max_entries, rng):
    size = int(np.prod(shape))
    if size <= max_entries:
        return None
    flat = rng.choice(size, size=max_entries, replace=False)
    return [np.unravel_index(i, shape) for i in flat]


def _compare(what, analytic, numeric, rtol, atol):
    checked = ~np.isnan(numeric)
    a = np.asarray(analytic, dtype=np.float64)[checked]
    n = numeric[checked]
    if a.shape != n.shape:
        raise AssertionError(f"{what}: analytic gradient of shape {np.shape(analytic)}")
    bad = np.abs(a - n) > atol + rtol * np.abs(n)
    if bad.any():
        worst = int(np.argmax(np.abs(a - n)))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {a.size} entries differ from finite differences; "
            f"worst: analytic {a[worst]!r} vs numerical {n[worst]!r}")


def gradcheck(module, x, *args, forward=None, eps=1e-6, rtol=1e-5, atol=1e-7,
              max_entries=60, check_input=True, check_params=True, seed=0):
    """Check ``module.backward`` (input and parameter gradients) numerically.

    Parameters
    ----------
    module : hpcdist.nn.Module
    x : ndarray, float64
        The input (perturbed in place during the check, then restored).
    *args
        Further arguments of forward (a loss's target).
    forward : callable, optional
        ``forward(x, *args)`` to use instead of ``module.forward`` (e.g. to
        reset a random generator before each call).
    max_entries : int
        Entries checked per array (a random subset of larger arrays).

    Returns
    -------
    dict
        ``{"input": grad_x, "<parameter name>": grad, ...}``, the analytic
        gradients that passed.
    """
    forward = module.forward if forward is None else forward
    rng = np.random.default_rng(seed)
    out = forward(x, *args)
    weights = rng.standard_normal(np.shape(out))
    module.zero_grad(set_to_none=True)
    out = forward(x, *args)
    grad_output = float(weights) if np.ndim(out) == 0 else weights.astype(np.asarray(out).dtype)
    grad_x = module.backward(grad_output)
    analytic = {"input": np.array(grad_x, copy=True)}
    for name, parameter in module.named_parameters():
        if parameter.requires_grad:
            analytic[name] = None if parameter.grad is None else parameter.grad.copy()

    def f():
        return _objective(forward, x, args, weights)

    if check_input:
        numeric = numerical_grad(f, x, eps=eps, indices=_indices(x.shape, max_entries, rng))
        _compare("input gradient", grad_x, numeric, rtol, atol)
    if check_params:
        for name, parameter in module.named_parameters():
            if not parameter.requires_grad:
                continue
            if analytic[name] is None:
                raise AssertionError(f"parameter {name!r}: no gradient after backward")
            numeric = numerical_grad(f, parameter.data, eps=eps,
                                     indices=_indices(parameter.shape, max_entries, rng))
            _compare(f"parameter {name!r}", analytic[name], numeric, rtol, atol)
    return analytic
