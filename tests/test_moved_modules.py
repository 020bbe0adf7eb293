"""Old import paths of moved modules keep working for one release, warn, and are the moved module itself."""

import importlib
import sys

import pytest

#: old path -> new path (docs/migration.md, "Modules that moved")
MOVED = {
    "ddpo_grpo.images": "foundation.images",
    "ddpo_grpo.errors": "foundation.errors",
    "ddpo_grpo.plugins": "foundation.plugins",
    "ddpo_grpo.pipelines": "ddpo_grpo.denoiser_pipeline",
    "ddpo_grpo.consistency": "ddpo_grpo.degradations",
    "ddpo_grpo.components": "ddpo_grpo.wiring",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_warns_and_is_the_new_module(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=MOVED[old]):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_logging_utils_names_are_the_new_ones():
    with pytest.warns(DeprecationWarning, match="image_grids"):
        sys.modules.pop("ddpo_grpo.logging_utils", None)
        old = importlib.import_module("ddpo_grpo.logging_utils")
    from ddpo_grpo.image_grids import save_grid
    from ddpo_grpo.metrics_log import MetricsLogger
    from foundation.atomic_io import atomic_write

    assert (old.save_grid, old.MetricsLogger, old.atomic_write) == (save_grid, MetricsLogger, atomic_write)


def test_the_contract_name_of_the_kernels_is_the_kernels_package():
    import ddpo_grpo.kernels
    import ddpo_grpo.sde

    assert ddpo_grpo.sde is ddpo_grpo.kernels
    assert ddpo_grpo.sde.flow_sde_step is ddpo_grpo.kernels.flow.flow_sde_step
