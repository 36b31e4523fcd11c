import enum

class AttentionBackendEnum(str, enum.Enum):
    FLASH_ATTN = "FLASH_ATTN"
    FLASHINFER = "FLASHINFER"
    TRITON_ATTN = "TRITON_ATTN"
    FLEX_ATTENTION = "FLEX_ATTENTION"
    TURBOQUANT = "TURBOQUANT"
    CPU_ATTN = "CPU_ATTN"
    def get_path(self) -> str: ...

__all__ = ["AttentionBackendEnum"]
