"""The routed method: a low-rank delta per document, used only for prompts the framework routes to the document."""
from core.registry import MethodSpec, register
from methods.routed.config import RoutedSettings
from methods.routed.export import export_routed
from methods.routed.serving import RoutedServed
from methods.routed.training import RoutedMethod

register(MethodSpec("routed", RoutedServed, RoutedMethod, RoutedSettings, "routed_lora.safetensors", removable=True,
                    per_document=True, export=export_routed))
