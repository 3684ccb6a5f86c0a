"""Declarative op checks: outputs against a numpy reference, gradients against
central finite differences in float64.

``check_output(op, inputs, attrs, expected)`` runs the op with ``run_op`` and
compares every expected slot. ``check_grad(op, inputs, attrs, wrt)`` builds the
op's gradient ops with its registered gradient maker, feeds them random output
gradients ``w`` and compares each requested input gradient with the numerical
derivative of ``sum(w * op(inputs))``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.backend import to_host
from reference_framework.registry import OpSpec, get_op_def, grad_var_name

_skip_without_gpu = pytest.mark.skipif(
    not rf.gpu_available(), reason=f"needs a usable CUDA GPU: {rf.backend.gpu_unavailable_reason()}"
)


def requires_gpu(test: Any) -> Any:
    """A GPU test: marked ``gpu`` (``pytest -m gpu``) and skipped without a usable GPU."""
    return pytest.mark.gpu(_skip_without_gpu(test))


def _copy(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Fresh copies, so in-place ops cannot change the caller's arrays."""
    return {
        k: [np.array(a) for a in v] if isinstance(v, list) else np.array(v)
        for k, v in inputs.items()
    }


def run(op_type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None = None,
        place: Any = None) -> dict[str, Any]:
    """``run_op`` on copies of the inputs, outputs brought back to numpy."""
    outs = rf.run_op(op_type, _copy(inputs), attrs, place)
    return {
        k: [to_host(a) for a in v] if isinstance(v, list) else to_host(v) for k, v in outs.items()
    }


def check_output(op_type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None,
                 expected: Mapping[str, Any], rtol: float = 1e-6, atol: float = 1e-7,
                 place: Any = None) -> dict[str, Any]:
    outs = run(op_type, inputs, attrs, place)
    for slot, want in expected.items():
        got = outs[slot]
        np.testing.assert_allclose(
            got, want, rtol=rtol, atol=atol, err_msg=f"{op_type} output {slot}"
        )
        assert np.asarray(got).shape == np.asarray(want).shape, f"{op_type} output {slot} shape"
    return outs


def _names(inputs: Mapping[str, Any]) -> dict[str, list[str]]:
    return {
        k: [f"{k}#{i}" for i in range(len(v))] if isinstance(v, list) else [k]
        for k, v in inputs.items()
    }


def _env(names: Mapping[str, list[str]], values: Mapping[str, Any]) -> dict[str, Any]:
    env = {}
    for slot, ns in names.items():
        vs = values[slot] if isinstance(values[slot], list) else [values[slot]]
        env.update(zip(ns, vs, strict=True))
    return env


def analytic_grads(op_type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None,
                   out_grads: Mapping[str, Any]) -> dict[str, Any]:
    """Input gradients, by input variable name, from the registered gradient ops."""
    opdef = get_op_def(op_type)
    fwd_outs = run(op_type, inputs, attrs)
    in_names = _names(inputs)
    out_names = _names({s.name: fwd_outs[s.name] for s in opdef.outputs if s.name in fwd_outs})
    desc = OpSpec(op_type, in_names, out_names, opdef.complete_attrs(attrs))
    env = _env(in_names, _copy(inputs))
    env.update(_env(out_names, fwd_outs))
    for slot, g in out_grads.items():
        env.update({grad_var_name(n): np.array(g) for n in out_names[slot]})
    assert opdef.grad is not None, f"{op_type} has no gradient maker"
    for spec in opdef.grad(desc):
        ins = {
            s: [env[n] for n in ns]
            if get_op_def(spec.type).input_slots[s].duplicable
            else env[ns[0]]
            for s, ns in spec.inputs.items()
            if all(n in env for n in ns)
        }
        outs = run(spec.type, ins, spec.attrs)
        for slot, ns in spec.outputs.items():
            vals = outs.get(slot)
            if vals is None:
                continue
            env.update(zip(ns, vals if isinstance(vals, list) else [vals], strict=True))
    return env


def numeric_grad(op_type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None,
                 out_grads: Mapping[str, Any], wrt: str, eps: float = 1e-6,
                 max_elements: int | None = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Central differences of ``sum(w * out)`` w.r.t. input ``wrt``; returns
    (indices checked as flat positions, gradient values at them)."""
    x = np.asarray(inputs[wrt], dtype=np.float64)
    flat = np.arange(x.size)
    if max_elements is not None and x.size > max_elements:
        flat = np.sort(np.random.default_rng(seed).choice(x.size, max_elements, replace=False))

    def loss(xv: np.ndarray) -> float:
        outs = run(op_type, {**inputs, wrt: xv}, attrs)
        return float(sum(np.sum(outs[s] * w) for s, w in out_grads.items()))

    grads = np.empty(len(flat))
    for j, i in enumerate(flat):
        xp = x.copy().reshape(-1)
        xm = x.copy().reshape(-1)
        xp[i] += eps
        xm[i] -= eps
        grads[j] = (loss(xp.reshape(x.shape)) - loss(xm.reshape(x.shape))) / (2 * eps)
    return flat, grads


def check_grad(op_type: str, inputs: Mapping[str, Any], attrs: Mapping[str, Any] | None = None,
               wrt: Sequence[str] | None = None, outputs: Sequence[str] | None = None,
               eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7,
               max_elements: int | None = 400, seed: int = 0) -> None:
    """Compare the registered gradient of ``op_type`` with finite differences.

    ``inputs`` should be float64 (integer inputs such as labels are left
    alone). ``wrt``: input slots to check (default: every float input);
    ``outputs``: output slots the loss is taken over (default: every output
    whose gradient the gradient ops read).
    """
    inputs = {k: np.asarray(v) if not isinstance(v, list) else v for k, v in inputs.items()}
    opdef = get_op_def(op_type)
    probe = opdef.grad(OpSpec(op_type, _names(inputs), {s.name: [s.name] for s in opdef.outputs},
                              opdef.complete_attrs(attrs)))
    read = {n for spec in probe for ns in spec.inputs.values() for n in ns}
    if outputs is None:
        outputs = [s.name for s in opdef.outputs if grad_var_name(s.name) in read]
    if wrt is None:
        wrt = [
            k
            for k, v in inputs.items()
            if not isinstance(v, list) and np.issubdtype(v.dtype, np.floating)
        ]
    fwd = run(op_type, inputs, attrs)
    rng = np.random.default_rng(seed + 1)
    out_grads = {s: rng.standard_normal(np.shape(fwd[s])) for s in outputs}
    env = analytic_grads(op_type, inputs, attrs, out_grads)
    for slot in wrt:
        got = env.get(grad_var_name(slot))
        assert got is not None, f"{op_type}: the gradient ops did not produce {grad_var_name(slot)}"
        assert np.shape(got) == np.shape(inputs[slot]), (
            f"{op_type}: {grad_var_name(slot)} has shape {np.shape(got)}, "
            f"input has {np.shape(inputs[slot])}"
        )
        idx, want = numeric_grad(op_type, inputs, attrs, out_grads, slot, eps, max_elements, seed)
        np.testing.assert_allclose(
            np.asarray(got, dtype=np.float64).reshape(-1)[idx],
            want,
            rtol=rtol,
            atol=atol,
            err_msg=f"{op_type}: gradient of {slot}",
        )
