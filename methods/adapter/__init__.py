"""The adapter method: one LoRA adapter that every update continues (PEFT)."""
from core.registry import MethodSpec, register
from methods.adapter.config import AdapterSettings
from methods.adapter.export import export_adapter
from methods.adapter.serving import AdapterServed
from methods.adapter.training import AdapterMethod

register(MethodSpec("adapter", AdapterServed, AdapterMethod, AdapterSettings, "adapter.safetensors",
                    export=export_adapter))
