"""Per-example gradient clipping without materialising per-example gradients.

DP-SGD (Abadi et al. 2016, Alg. 1) needs `sum_i clip_C(g_i)` and the norms `||g_i||`.
Materialising `g_i` for every example (`tf.vectorized_map` / `GradientTape.jacobian`)
costs `B` copies of the model. For networks built from `Dense` and `Conv2D` layers
joined by parameter-free layers (activations, pooling, flattening, padding) — every
network in `tffdp.models` — the same quantities follow from one forward and one
backward pass (Goodfellow 2015; Rochette et al. 2019; Li et al. 2022 "ghost clipping"):

- `Dense` with input `a_i` and output gradient `d_i`: the kernel gradient is
  `a_i d_i^T`, so `||grad_i||^2 = ||a_i||^2 ||d_i||^2` (+ `||d_i||^2` for the bias) and
  the clipped sum is `A^T (s * D)`.
- `Conv2D`: with input patches `P_i` (`[positions, k*k*c_in]`) and output gradients
  `D_i` (`[positions, c_out]`), `grad_i = P_i^T D_i` — small (`k*k*c_in x c_out`) —
  formed per example, its norm taken and the clipped sum `sum_i s_i P_i^T D_i` computed
  from it. For stride-1 layers `grad_i` is built from slices of the (padded) input, one
  per kernel offset, rather than `tf.image.extract_patches` (up to 5x slower on CPU;
  see `conv_kernel_gradients`).

Here `D` are gradients of the *sum* of per-example losses with respect to each layer's
pre-activation output (rows are per-example since examples do not interact), and
`s_i = min(1, C / ||g_i||)`. Models with other parameterised layers fall back to
`tf.vectorized_map` (exact, slower).
"""

from __future__ import annotations

import tensorflow as tf

_FREE_LAYERS = (tf.keras.layers.Flatten, tf.keras.layers.MaxPool2D,
                tf.keras.layers.AveragePooling2D, tf.keras.layers.ZeroPadding2D,
                tf.keras.layers.ReLU, tf.keras.layers.Activation,
                tf.keras.layers.InputLayer, tf.keras.layers.Reshape,
                tf.keras.layers.Dropout)


def supports_fast_clipping(model: tf.keras.Model) -> bool:
  """True if `model` is a `Sequential` of Dense/Conv2D and parameter-free layers."""
  if not isinstance(model, tf.keras.Sequential):
    return False
  for layer in model.layers:
    if isinstance(layer, tf.keras.layers.Dense):
      continue
    if isinstance(layer, tf.keras.layers.Conv2D) and type(layer) is tf.keras.layers.Conv2D:
      if layer.dilation_rate != (1, 1) or layer.groups != 1 or \
          layer.data_format != 'channels_last':
        return False
      continue
    if isinstance(layer, _FREE_LAYERS) and not layer.trainable_weights:
      continue
    return False
  return True


def _forward(model, x, training):
  """Runs the layers, returning logits and `(layer, input, pre_activation)` records."""
  records = []
  h = x
  for layer in model.layers:
    if isinstance(layer, tf.keras.layers.Dense):
      z = tf.matmul(h, layer.kernel)
      if layer.use_bias:
        z = z + layer.bias
      records.append((layer, h, z))
      h = layer.activation(z)
    elif isinstance(layer, tf.keras.layers.Conv2D):
      z = tf.nn.conv2d(h, layer.kernel, strides=layer.strides, padding=layer.padding.upper())
      if layer.use_bias:
        z = z + layer.bias
      records.append((layer, h, z))
      h = layer.activation(z)
    else:
      h = layer(h, training=training)
  return h, records


def _same_padding(size: int, kernel: int) -> tuple[int, int]:
  """TF's `padding='SAME'` split (before, after) for one spatial axis at stride 1."""
  total = max(kernel - 1, 0)
  return total // 2, total - total // 2


# Output positions per example at or above which the per-offset contraction is used
# (below it, one contraction over materialised patches is faster; measured on this
# package's CNNs, see `conv_kernel_gradients`).
_OFFSET_MIN_POSITIONS = 128


# Largest `c_in * c_out` of a layer whose per-example kernel gradients are taken by one
# depthwise filter gradient with the batch folded into the channels (measured on this
# package's CNNs by `python -m benchmarks.run --only conv`: against the next best path,
# 1.1-2.2x faster for their first layers, `c_in * c_out` 10-32, except AlexNet-style's,
# about even; as fast to 3.5x slower at 96, 1.8-30x slower from 200 up).
_DEPTHWISE_MAX_CHANNELS = 64

CONV_GRADIENT_PATHS = ('depthwise', 'offsets', 'patches', 'extract_patches')


def _conv_gradient_path(c_in: int, c_out: int, positions: int, strides) -> str:
  """The fastest measured way to `conv_kernel_gradients` for a layer's shape."""
  if c_in * c_out <= _DEPTHWISE_MAX_CHANNELS and strides[0] == strides[1]:
    return 'depthwise'
  if tuple(strides) != (1, 1):
    return 'extract_patches'
  return 'offsets' if positions >= _OFFSET_MIN_POSITIONS else 'patches'


def _depthwise_kernel_gradients(a, d, kernel_size, strides, padding):
  """`conv_kernel_gradients` by one depthwise filter gradient over `B * c_in` channels.

  Example `b`'s input channel `c` becomes channel `b * c_in + c` of a one-image batch,
  and the output gradient of its channel `o` is repeated for every `c`: the depthwise
  filter gradient of channel `(b, c)` and multiplier `o` is then `grad_b[:, :, c, o]`.
  """
  kh, kw = kernel_size
  b, c_in, c_out = tf.shape(a)[0], a.shape[-1], d.shape[-1]
  h, w, oh, ow = a.shape[1], a.shape[2], d.shape[1], d.shape[2]
  x = tf.reshape(tf.transpose(a, [1, 2, 0, 3]), [1, h, w, b * c_in])
  dy = tf.broadcast_to(d[:, :, :, None, :], [b, oh, ow, c_in, c_out])
  dy = tf.reshape(tf.transpose(dy, [1, 2, 0, 3, 4]), [1, oh, ow, b * c_in * c_out])
  g = tf.compat.v1.nn.depthwise_conv2d_native_backprop_filter(
      x, tf.stack([kh, kw, b * c_in, c_out]), dy, strides=[1, *strides, 1],
      padding=padding.upper())
  g = tf.reshape(g, [kh, kw, b, c_in, c_out])
  return tf.reshape(tf.transpose(g, [2, 0, 1, 3, 4]), [b, kh * kw * c_in, c_out])


def conv_kernel_gradients(a: tf.Tensor, d: tf.Tensor, kernel_size, strides,
                          padding: str, path: str | None = None) -> tf.Tensor:
  """Per-example `Conv2D` kernel gradients, `grad_i = P_i^T D_i`.

  Args:
    a: Layer inputs `[B, H, W, c_in]` float32 (static spatial shape).
    d: Gradients with respect to the layer's pre-activation output
      `[B, H_out, W_out, c_out]` float32.
    kernel_size: `(k_h, k_w)`.
    strides: `(s_h, s_w)`.
    padding: `'SAME'` or `'VALID'` (as `tf.nn.conv2d`), case-insensitive.
    path: One of `CONV_GRADIENT_PATHS` to force a computation (tests, benchmarks);
      None picks the fastest measured for the layer's shape (below).

  Raises:
    ValueError: If a spatial dimension or the channel count of `a` or `d` is not known
      statically, `path` is unknown, or `path='depthwise'` with unequal row and column
      strides.

  Returns:
    `[B, k_h * k_w * c_in, c_out]` float32, row `(i * k_w + j) * c_in + c` the kernel
    entry `[i, j, c]`, i.e. `tf.reshape(grad, [B, *kernel.shape])` is each example's
    kernel gradient (the layout of `tf.image.extract_patches` patches, which it equals:
    tested).

  Layers with few channels (`c_in * c_out <= _DEPTHWISE_MAX_CHANNELS`, the first layer
  of every CNN here but one) take one depthwise filter gradient with the batch folded
  into the channels (Rochette et al. 2019, "Efficient per-example gradient computations
  in convolutional neural networks"), with any stride equal in rows and columns (TF's
  CPU `DepthwiseConv2dNativeBackpropFilter` refuses unequal ones on some builds).
  Otherwise, for stride 1, each kernel offset `(i, j)` reads the slice of the padded
  input that meets the output positions; with many output positions
  (`>= _OFFSET_MIN_POSITIONS`) each slice is contracted with `d` on its own (`k_h * k_w`
  batched matmuls, no patches in memory), otherwise the slices are concatenated into
  patches and contracted once.
  Strided convolutions use `tf.image.extract_patches`, faster there than strided slices.
  Measured by `python -m benchmarks.run --only conv` on the 2-core CPU (ms, at the
  experiments' batch sizes), `extract_patches` vs this: LeNet conv1 (32x32x3, batch 50)
  13.2 vs 2.7; McMahan CNN conv2 9.5 vs 5.7; AlexNet-style conv3 (7x7 outputs) 3.0 vs
  2.5; for the Adap DP-FL CNN's conv1 (8x8, stride 2) strided slices took 12.8 against
  `extract_patches`' 2.2 (`benchmarks/README.md`).
  """
  kh, kw = kernel_size
  h, w = a.shape[1], a.shape[2]
  oh, ow = d.shape[1], d.shape[2]
  if None in (h, w, oh, ow, a.shape[-1], d.shape[-1]):
    raise ValueError('conv_kernel_gradients needs static spatial shapes and channels '
                     '(build the model with an input shape); got inputs '
                     f'{a.shape}, output gradients {d.shape}')
  if path is None:
    path = _conv_gradient_path(a.shape[-1], d.shape[-1], oh * ow, strides)
  if path not in CONV_GRADIENT_PATHS:
    raise ValueError(f'path must be one of {CONV_GRADIENT_PATHS}. Found {path!r}.')
  if path == 'depthwise':
    if strides[0] != strides[1]:
      raise ValueError('path depthwise needs equal row and column strides (TF\'s CPU '
                       f'depthwise filter gradient). Found strides={tuple(strides)}.')
    return _depthwise_kernel_gradients(a, d, kernel_size, strides, padding)
  b, c_out = tf.shape(a)[0], tf.shape(d)[-1]
  d_flat = tf.reshape(d, [b, oh * ow, c_out])
  if path == 'extract_patches':
    patches = tf.image.extract_patches(a, sizes=[1, kh, kw, 1], strides=[1, *strides, 1],
                                       rates=[1, 1, 1, 1], padding=padding.upper())
    return tf.matmul(tf.reshape(patches, [b, oh * ow, -1]), d_flat, transpose_a=True)
  if tuple(strides) != (1, 1):
    raise ValueError(f'path {path!r} needs stride 1; got {strides}')
  if padding.upper() == 'SAME':
    a = tf.pad(a, [[0, 0], _same_padding(h, kh), _same_padding(w, kw), [0, 0]])
  slices = [a[:, i:i + oh, j:j + ow, :] for i in range(kh) for j in range(kw)]
  if path == 'offsets':
    grads = tf.stack([tf.einsum('bhwc,bhwo->bco', s, d) for s in slices], axis=1)
    return tf.reshape(grads, [b, -1, c_out])
  patches = tf.reshape(tf.concat(slices, axis=-1), [b, oh * ow, -1])
  return tf.matmul(patches, d_flat, transpose_a=True)


def _per_example_parts(model, x, y, training):
  """One forward and backward pass: per-layer factors, per-example norms and losses.

  Returns `(parts, norms [B], losses [B])`; `parts` holds, per parameterised layer,
  `('dense', layer, a, d)` (inputs and output gradients) or `('conv', layer, g, gb)`
  (per-example kernel gradients `[B, k*k*c_in, c_out]` and bias gradients `[B, c_out]`).
  """
  with tf.GradientTape() as tape:
    logits, records = _forward(model, x, training)
    zs = [z for _, _, z in records]
    tape.watch(zs)
    losses = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    total = tf.reduce_sum(losses)
  dzs = tape.gradient(total, zs)
  b = tf.shape(x)[0]
  sq_norms = tf.zeros([b])
  parts = []
  for (layer, a, _), d in zip(records, dzs):
    if isinstance(layer, tf.keras.layers.Dense):
      a2 = tf.reduce_sum(tf.square(a), axis=1)
      d2 = tf.reduce_sum(tf.square(d), axis=1)
      sq_norms += a2 * d2 + (d2 if layer.use_bias else 0.0)
      parts.append(('dense', layer, a, d))
    else:
      g = conv_kernel_gradients(a, d, layer.kernel_size, layer.strides, layer.padding)
      d_flat = tf.reshape(d, [b, -1, tf.shape(d)[-1]])
      sq_norms += tf.reduce_sum(tf.square(g), axis=[1, 2])
      gb = tf.reduce_sum(d_flat, axis=1)
      if layer.use_bias:
        sq_norms += tf.reduce_sum(tf.square(gb), axis=1)
      parts.append(('conv', layer, g, gb))
  return parts, tf.sqrt(sq_norms), losses


def clip_scale(norms, clip_norm):
  """`min(1, C / ||g||)` per norm: the per-example clipping factor (`C` = `clip_norm`)."""
  return tf.minimum(1.0, clip_norm / tf.maximum(norms, 1e-12))


def clipped_gradient_sum(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor,
                         clip_norm: tf.Tensor, training: bool = True):
  """Sum of per-example gradients, each clipped to L2 norm `clip_norm`.

  Args:
    model: A Keras model with logits output; see `supports_fast_clipping`.
    x: Inputs `[B, ...]` float32.
    y: Labels `[B]` int32.
    clip_norm: Scalar float32 `C > 0`.
    training: Passed to parameter-free layers.

  Returns:
    `(clipped_sum, norms, losses)`: a list shaped like `model.trainable_variables`,
    the unclipped per-example gradient norms `[B]` and per-example losses `[B]`.
  """
  if not supports_fast_clipping(model):
    return clipped_gradient_sum_vmap(model, x, y, clip_norm)
  parts, norms, losses = _per_example_parts(model, x, y, training)
  scale = clip_scale(norms, clip_norm)
  grads = {}
  for kind, layer, u, v in parts:
    if kind == 'dense':
      sd = v * scale[:, None]
      grads[id(layer.kernel)] = tf.matmul(u, sd, transpose_a=True)
      if layer.use_bias:
        grads[id(layer.bias)] = tf.reduce_sum(sd, axis=0)
    else:
      grads[id(layer.kernel)] = tf.reshape(tf.tensordot(scale, u, axes=1), tf.shape(layer.kernel))
      if layer.use_bias:
        grads[id(layer.bias)] = tf.tensordot(scale, v, axes=1)
  return [grads[id(v)] for v in model.trainable_variables], norms, losses


def clipped_gradient_segment_sums(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor,
                                  row_splits: tf.Tensor, clip_norms: tf.Tensor,
                                  training: bool = True):
  """Per-segment sums of clipped per-example gradients, one pass for all segments.

  For several clients that evaluate gradients at the same weights (e.g. one local step
  from the broadcast model), rows `row_splits[k]:row_splits[k+1]` of `x` are client
  `k`'s examples, clipped at client `k`'s own `clip_norms[k]`. Equal to calling
  `clipped_gradient_sum` on each segment (tested), with one forward/backward pass.

  Args:
    model: A Keras model with logits output.
    x: Inputs `[B, ...]` float32, segments contiguous.
    y: Labels `[B]` int32.
    row_splits: int64 `[S + 1]`, non-decreasing, `row_splits[0] = 0`, last `= B`.
    clip_norms: float32 `[S]`, `> 0`.
    training: Passed to parameter-free layers.

  Returns:
    `(clipped_sums, norms, losses)`: a list shaped like `model.trainable_variables`
    with a leading segment axis (`[S, *var.shape]`), the unclipped per-example norms
    `[B]` and per-example losses `[B]`.
  """
  num_segments = tf.shape(row_splits)[0] - 1
  segment_ids = tf.ragged.row_splits_to_segment_ids(row_splits, out_type=tf.int32)
  scale_of = lambda norms: clip_scale(norms, tf.gather(clip_norms, segment_ids))
  seg_sum = lambda t: tf.math.unsorted_segment_sum(t, segment_ids, num_segments)
  if not supports_fast_clipping(model):
    losses, grads = per_example_gradients(model, x, y)
    sq = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), axis=1)
                   for g in grads])
    norms = tf.sqrt(sq)
    scale = scale_of(norms)
    return [seg_sum(g * tf.reshape(scale, [-1] + [1] * (g.shape.rank - 1)))
            for g in grads], norms, losses
  parts, norms, losses = _per_example_parts(model, x, y, training)
  scale = scale_of(norms)
  # Position of each row inside its segment, to lay segments out as [S, max_len, ...]
  # for the Dense layers' per-segment matmuls.
  starts = tf.gather(row_splits, segment_ids)
  positions = tf.stack([tf.cast(segment_ids, tf.int64),
                        tf.range(tf.shape(x, out_type=tf.int64)[0]) - starts], axis=1)
  max_len = tf.reduce_max(row_splits[1:] - row_splits[:-1])
  grads = {}
  for kind, layer, u, v in parts:
    if kind == 'dense':
      sd = v * scale[:, None]
      pad = lambda t: tf.scatter_nd(positions, t, tf.stack(
          [tf.cast(num_segments, tf.int64), max_len, tf.shape(t, out_type=tf.int64)[1]]))
      grads[id(layer.kernel)] = tf.matmul(pad(u), pad(sd), transpose_a=True)
      if layer.use_bias:
        grads[id(layer.bias)] = seg_sum(sd)
    else:
      kernel = seg_sum(u * scale[:, None, None])
      grads[id(layer.kernel)] = tf.reshape(
          kernel, tf.concat([[num_segments], tf.shape(layer.kernel)], 0))
      if layer.use_bias:
        grads[id(layer.bias)] = seg_sum(v * scale[:, None])
  return [grads[id(v)] for v in model.trainable_variables], norms, losses


def per_example_gradients(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor):
  """Materialised per-example gradients via `tf.vectorized_map` (reference path).

  Returns:
    `(losses [B], grads)`, `grads` a list of `[B, *var.shape]` tensors.
  """
  def one(example):
    xi, yi = example
    with tf.GradientTape() as tape:
      logits = model(xi[None], training=True)
      loss = tf.keras.losses.sparse_categorical_crossentropy(yi[None], logits,
                                                             from_logits=True)[0]
    return loss, tape.gradient(loss, model.trainable_variables)
  return tf.vectorized_map(one, (x, y))


def clip_and_sum(grads, clip_norm):
  """`(sum_i g_i * min(1, C/||g_i||), norms [B])` of materialised per-example grads."""
  sq = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), axis=1)
                 for g in grads])
  norms = tf.sqrt(sq)
  scale = clip_scale(norms, clip_norm)
  return [tf.tensordot(scale, g, axes=1) for g in grads], norms


def clipped_gradient_sum_vmap(model, x, y, clip_norm):
  """Same contract as `clipped_gradient_sum`, via materialised per-example gradients."""
  losses, grads = per_example_gradients(model, x, y)
  summed, norms = clip_and_sum(grads, clip_norm)
  return summed, norms, losses
