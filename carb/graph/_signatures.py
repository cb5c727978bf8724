"""The argument names of the functions capture reads by name (:func:`carb.graph._geometry._bind`): plain data."""

from __future__ import annotations

#: Argument names of the calls whose parameters are read, by the name the traced node carries
#: (torch's functions under ``torch.fx``; their ATen operators under ``torch.export``).
SIGNATURES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("conv1d", "conv2d", "conv3d"), ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    ),
    **dict.fromkeys(
        ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
        ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    ),
    **dict.fromkeys(
        ("max_pool1d", "max_pool2d", "max_pool3d"),
        ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    ),
    **dict.fromkeys(
        ("avg_pool1d", "avg_pool2d", "avg_pool3d"),
        ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
    ),
    **dict.fromkeys(("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"), ("input", "output_size")),
    **dict.fromkeys(
        ("interpolate", "upsample"),
        ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias"),
    ),
    "upsample_nearest2d": ("input", "output_size", "scale_factors"),
    "upsample_bilinear2d": ("input", "output_size", "align_corners", "scale_factors"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "group_norm": ("input", "num_groups", "weight", "bias", "eps"),
    "instance_norm": ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats"),
    "softmax": ("input", "dim", "_stacklevel", "dtype"),
    "pixel_shuffle": ("input", "upscale_factor"),
    "pixel_unshuffle": ("input", "downscale_factor"),
    "pad": ("input", "pad", "mode", "value"),
    "constant_pad_nd": ("input", "pad", "value"),
    **dict.fromkeys(
        ("reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d")
        + ("replication_pad3d",),
        ("input", "padding"),
    ),
    "scaled_dot_product_attention": (
        "query",
        "key",
        "value",
        "attn_mask",
        "dropout_p",
        "is_causal",
        "scale",
        "enable_gqa",
    ),
}


#: The ATen operators (``torch.export``'s graphs) whose arguments come in another order than their functions'.
ATEN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "instance_norm": ("input", "weight", "bias", "running_mean", "running_var", "use_input_stats"),
}
