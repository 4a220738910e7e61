"""The adapter method: one LoRA adapter that every update continues (PEFT)."""
from core.registry import MethodSpec, register
from methods.adapter.config import AdapterSettings
from methods.adapter.serving import AdapterServed
from methods.adapter.training import AdapterMethod

register(MethodSpec("adapter", AdapterServed, AdapterMethod, AdapterSettings, "adapter.safetensors"))
