"""Swin v1 state-dict renames to timm's names (design note hierarchical.md 3.1). Buffers that
attnscope computes itself (relative_position_index, attn_mask) are dropped.

    from_torchvision(sd)  torchvision 0.14 swin_t / swin_s / swin_b (and SwinTransformer)
    from_official(sd)     microsoft/Swin-Transformer .pth ("model" entry): the merge at the end
                          of stage i becomes layers.{i+1}.downsample, head.* becomes head.fc.*
Keys it does not know raise KeyError with the key named."""
import re

DROP = ("relative_position_index", "attn_mask")


def _dropped(k):
    return k.rsplit(".", 1)[-1] in DROP


def from_torchvision(sd):
    out = {}
    for k, v in sd.items():
        if _dropped(k):
            continue
        m = re.fullmatch(r"features\.0\.0\.(weight|bias)", k)
        if m:
            out[f"patch_embed.proj.{m[1]}"] = v
            continue
        m = re.fullmatch(r"features\.0\.2\.(weight|bias)", k)
        if m:
            out[f"patch_embed.norm.{m[1]}"] = v
            continue
        m = re.fullmatch(r"features\.(\d+)\.(\d+)\.(.+)", k)
        if m and int(m[1]) % 2 == 1:  # blocks of stage (i - 1) / 2
            s, j, rest = (int(m[1]) - 1) // 2, m[2], m[3]
            rest = re.sub(r"^mlp\.0\.", "mlp.fc1.", rest)
            rest = re.sub(r"^mlp\.3\.", "mlp.fc2.", rest)
            if not re.fullmatch(r"(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)"
                                r"|attn\.relative_position_bias_table", rest):
                raise KeyError(f"unknown torchvision Swin key {k}")
            out[f"layers.{s}.blocks.{j}.{rest}"] = v
            continue
        m = re.fullmatch(r"features\.(\d+)\.(reduction\.weight|norm\.weight|norm\.bias)", k)
        if m and int(m[1]) % 2 == 0 and int(m[1]) >= 2:  # the merge before stage i / 2
            out[f"layers.{int(m[1]) // 2}.downsample.{m[2]}"] = v
            continue
        m = re.fullmatch(r"(norm|head)\.(weight|bias)", k)
        if m:
            out[f"norm.{m[2]}" if m[1] == "norm" else f"head.fc.{m[2]}"] = v
            continue
        raise KeyError(f"unknown torchvision Swin key {k}")
    return out


def from_official(sd):
    out = {}
    for k, v in sd.items():
        if _dropped(k):
            continue
        m = re.fullmatch(r"layers\.(\d+)\.downsample\.(.+)", k)
        if m:
            out[f"layers.{int(m[1]) + 1}.downsample.{m[2]}"] = v
            continue
        m = re.fullmatch(r"head\.(weight|bias)", k)
        if m:
            out[f"head.fc.{m[1]}"] = v
            continue
        out[k] = v
    return out
