"""The memory method: sparse memory finetuning of a product-key memory's value rows."""
from core.registry import MethodSpec, register
from methods.memory.config import MemorySettings
from methods.memory.serving import MemoryServed
from methods.memory.training import MemoryMethod

register(MethodSpec("memory", MemoryServed, MemoryMethod, MemorySettings, "memory_rows.safetensors", removable=True))
