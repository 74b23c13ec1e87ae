"""Saving the kernels that predictions evaluate: the kind ``kernel`` of :mod:`activated_dgp.saving`.

Nyström's out-of-sample extension ψ(x) = κ(x, X) C and the EigenPro models' predictions f(x) = Σ_j α_j κ(x, z_j)
evaluate their kernel, so it is saved with them (NeuralEF and IKA evaluate their networks or bases and save none). A
kernel is described by its class and the shapes its constructor needs; its parameters' values come back through the
checkpoint, bit for bit:

* gpflow's stationary kernels SquaredExponential (RBF), Exponential, Matern12, Matern32, Matern52 and
  RationalQuadratic: the lengthscales' shape and ``active_dims``;
* :class:`~activated_dgp.zonal.ZonalArcCosine` and :class:`~activated_dgp.zonal.kernels.ZonalMatchedKernel`: the
  input dimension, truncation level, bias, threshold, lengthscales' shape and ``active_dims`` (and the matched
  kernel's registered activation), with the Funk–Hecke spectrum stored and compared with the rebuilt kernel's;
* sums and products of these (gpflow's Sum and Product).

Every parameter's record (path, shape, transform with its constants, prior, dtype) is compared with that of the
kernel rebuilt from the description, when saving and again when loading, so a kernel whose values would mean
something else once rebuilt (another transform, a prior, another float type) is a ValueError naming the parameter.
Other kernels (a user's class, a :class:`~activated_dgp.zonal.kernels.ZonalKernel` of an arbitrary shape function)
are refused by name.
"""

from __future__ import annotations

from typing import Dict, List

import gpflow
import numpy as np

from .. import saving
from ..deep.introspection import check_spectra, compare_parameter_records, parameter_record, parameters_by_path
from ..zonal.kernels import ZonalArcCosine, ZonalMatchedKernel
from ..zonal.spectra import registered_activation_name

__all__ = ["SAVED_KERNELS", "describe_kernel_structure", "kernel_from_structure"]

_STATIONARY = {
    cls.__name__: cls
    for cls in (
        gpflow.kernels.SquaredExponential,
        gpflow.kernels.Exponential,
        gpflow.kernels.Matern12,
        gpflow.kernels.Matern32,
        gpflow.kernels.Matern52,
        gpflow.kernels.RationalQuadratic,
    )
}
_ZONAL = {cls.__name__: cls for cls in (ZonalArcCosine, ZonalMatchedKernel)}
_COMBINATIONS = {cls.__name__: cls for cls in (gpflow.kernels.Sum, gpflow.kernels.Product)}
#: the kernel classes the kind ``kernel`` saves
SAVED_KERNELS = tuple([*_STATIONARY, *_ZONAL, *_COMBINATIONS])


def _active_dims(kernel):
    dims = kernel.active_dims
    if isinstance(dims, slice):
        return None if dims == slice(None) else dict(slice=[dims.start, dims.stop, dims.step])
    return [int(i) for i in np.asarray(dims).reshape(-1)]


def _from_active_dims(spec):
    if spec is None:
        return None
    return slice(*spec["slice"]) if isinstance(spec, dict) else list(spec)


def describe_kernel_structure(kernel, where: str = "the kernel") -> dict:
    """What rebuilds an object of ``kernel``'s class and parameter shapes (module docstring); a ValueError naming
    ``where`` for a kernel that is not one of :data:`SAVED_KERNELS`."""
    name = type(kernel).__name__
    if name in _STATIONARY and type(kernel) is _STATIONARY[name]:
        return dict(type=name, lengthscales_shape=list(kernel.lengthscales.shape), active_dims=_active_dims(kernel))
    if name in _COMBINATIONS and type(kernel) is _COMBINATIONS[name]:
        return dict(type=name, kernels=[describe_kernel_structure(k, f"{where}.kernels[{i}]") for i, k in enumerate(kernel.kernels)])
    if name in _ZONAL and type(kernel) is _ZONAL[name]:
        structure = dict(
            type=name, input_dim=kernel.input_dim, truncation_level=kernel.truncation_level, bias=kernel.bias,
            threshold=kernel.threshold, lengthscales_shape=list(kernel.lengthscales.shape), active_dims=_active_dims(kernel),
        )
        if isinstance(kernel, ZonalMatchedKernel):
            try:
                structure["activation"] = registered_activation_name(kernel.activation)
            except ValueError as error:
                raise ValueError(f"cannot save {where}: {error}") from None
        return structure
    raise ValueError(f"cannot save {where}: a {type(kernel).__module__}.{name} kernel; the saved kernels are {', '.join(SAVED_KERNELS)}")


def kernel_from_structure(structure: dict):
    """The kernel :func:`describe_kernel_structure` describes, with default parameter values."""
    name = structure["type"]
    if name in _COMBINATIONS:
        return _COMBINATIONS[name]([kernel_from_structure(part) for part in structure["kernels"]])
    lengthscales = np.ones(structure["lengthscales_shape"])
    lengthscales = float(lengthscales) if lengthscales.ndim == 0 else lengthscales
    active_dims = _from_active_dims(structure["active_dims"])
    if name in _STATIONARY:
        return _STATIONARY[name](lengthscales=lengthscales, active_dims=active_dims)
    if name in _ZONAL:
        options = dict(bias=structure["bias"], threshold=structure["threshold"], active_dims=active_dims)
        if name == "ZonalMatchedKernel":
            options["activation"] = structure["activation"]
        return _ZONAL[name](structure["input_dim"], structure["truncation_level"], lengthscales=lengthscales, **options)
    raise ValueError(f"unknown saved kernel type {name!r}; this version of activated_dgp saves {', '.join(SAVED_KERNELS)}")


def _zonal_parts(kernel) -> List:
    if isinstance(kernel, (gpflow.kernels.Sum, gpflow.kernels.Product)):
        return [part for inner in kernel.kernels for part in _zonal_parts(inner)]
    return [kernel] if isinstance(kernel, (ZonalArcCosine, ZonalMatchedKernel)) else []


def _spectra(kernel) -> Dict[str, np.ndarray]:
    return {f"spectrum_{i}": np.asarray(part.eigenvalues, dtype=np.float64) for i, part in enumerate(_zonal_parts(kernel))}


def _records(kernel) -> Dict[str, dict]:
    return {path: parameter_record(p) for path, p in parameters_by_path(kernel).items()}


def _describe_kernel(kernel) -> saving.Description:
    structure = describe_kernel_structure(kernel)
    reference = kernel_from_structure(structure)
    what = f"cannot save the {type(kernel).__name__} kernel as rebuilt from its description"
    compare_parameter_records(_records(kernel), _records(reference), what)
    spectra = _spectra(kernel)
    check_spectra(spectra, _spectra(reference), f"cannot save the {type(kernel).__name__} kernel")
    records = {path: dict(parameter_record(p), trainable=bool(p.trainable)) for path, p in parameters_by_path(kernel).items()}
    return saving.Description(config=dict(structure=structure, parameters=records), trackable=kernel, arrays=spectra)


def _rebuild_kernel(config: dict, arrays: Dict[str, np.ndarray], children: dict):
    kernel = kernel_from_structure(config["structure"])
    compare_parameter_records(config["parameters"], _records(kernel), "the saved kernel does not match its description")
    check_spectra(arrays, _spectra(kernel), "the saved kernel")
    for path, parameter in parameters_by_path(kernel).items():
        gpflow.set_trainable(parameter, bool(config["parameters"][path]["trainable"]))
    return kernel, kernel


saving.register_saved_kind(
    saving.SavedKind(name="kernel", matches=lambda obj: isinstance(obj, gpflow.kernels.Kernel), describe=_describe_kernel, rebuild=_rebuild_kernel)
)
