"""The training sides of the registered update methods (service.knowledge.methods is the registry)."""
from importlib import import_module

from service.knowledge import methods
from workers.methods.base import UpdateMethod


def trainer_class(name: str) -> type[UpdateMethod]:
    """The training side of a registered method (its import path resolved on first use)."""
    trainer = methods.get(name).trainer
    if isinstance(trainer, str):
        module, _, attribute = trainer.partition(":")
        trainer = getattr(import_module(module), attribute)
    return trainer


__all__ = ["UpdateMethod", "trainer_class"]
