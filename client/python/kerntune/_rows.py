"""Where the rows of a strided tensor start, as the daemon's RowStrides says.

A last-axis op reads row r of (rows, cols) at r * stride elements, or, with
groups of group_rows rows, at (r // group_rows) * group_stride + (r %
group_rows) * stride. A view whose leading axes fold into at most two such
levels (the q of a fused qkv tensor, qkv.view(T, 3, H, D)[:, 0]: T groups of
H rows) is normalized in place; anything else is not a row layout here.
"""

import collections

from kerntune.v1 import kerntune_pb2 as pb

# stride: between rows of a group; group_rows: 0 = no groups; group_stride:
# between groups. In elements.
RowLayout = collections.namedtuple("RowLayout", "stride group_rows group_stride")


def contiguous(cols):
    return RowLayout(cols, 0, 0)


def is_contiguous(layout, cols):
    return layout.stride == cols and (layout.group_rows <= 1
                                      or layout.group_stride == layout.group_rows * cols)


def of(shape, strides):
    """The RowLayout of a tensor of `shape` reduced along its last axis, from
    its `strides` in elements; None when its last axis is not contiguous,
    its leading axes do not fold into two levels, or rows (or groups)
    overlap."""
    shape = tuple(int(n) for n in shape)
    strides = tuple(int(s) for s in strides)
    if not shape:
        return None
    cols = shape[-1]
    if cols > 1 and strides[-1] != 1:
        return None
    # Leading axes, outermost first, without those of size 1; then merged
    # where one steps exactly over the next.
    levels = []
    for size, stride in zip(shape[:-1], strides[:-1]):
        if size == 1:
            continue
        if stride <= 0:
            return None
        if levels and levels[-1][1] == stride * size:
            levels[-1] = (levels[-1][0] * size, stride)
        else:
            levels.append((size, stride))
    if not levels:
        return contiguous(cols)
    if len(levels) == 1:
        layout = RowLayout(levels[0][1], 0, 0)
    elif len(levels) == 2:
        (groups, group_stride), (group_rows, stride) = levels
        layout = RowLayout(stride, group_rows, group_stride)
    else:
        return None
    if layout.stride < cols:
        return None  # rows overlap
    if layout.group_rows and layout.group_stride < (layout.group_rows - 1) * layout.stride + cols:
        return None  # groups overlap
    return layout


def extent(layout, rows, cols):
    """Elements from the first of a tensor to one past its last."""
    if layout.group_rows:
        groups = rows // layout.group_rows
        return ((groups - 1) * layout.group_stride + (layout.group_rows - 1) * layout.stride
                + cols)
    return (rows - 1) * layout.stride + cols


def with_groups(layout, group_rows):
    """`layout` with groups of group_rows rows (0: as it is); None when it has
    groups of another size."""
    if group_rows == 0 or layout.group_rows == group_rows:
        return layout
    if layout.group_rows:
        return None
    return RowLayout(layout.stride, group_rows, group_rows * layout.stride)


def common_groups(*layouts):
    """The group_rows every grouped layout agrees on (0: none has groups), or
    None when two disagree."""
    sizes = {l.group_rows for l in layouts if l is not None and l.group_rows}
    if len(sizes) > 1:
        return None
    return sizes.pop() if sizes else 0


def proto(x, y, residual, cols):
    """pb.RowStrides for the input, output and residual layouts (residual
    may be None), or None when all are contiguous (the field stays unset,
    as an older daemon expects)."""
    layouts = [l for l in (x, y, residual) if l is not None]
    if all(is_contiguous(l, cols) for l in layouts):
        return None
    message = pb.RowStrides(input=x.stride, output=y.stride, group_rows=x.group_rows)
    if residual is not None:
        message.residual = residual.stride
    if x.group_rows:
        message.input_group = x.group_stride
        message.output_group = y.group_stride
    return message
