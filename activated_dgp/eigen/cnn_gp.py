"""The CNN-GP kernel of NeuralEF §4.2 by Monte Carlo over random networks (eq. 19).

κ(x, x') = E_θ[g(x, θ) g(x', θ)] for the CNN g = Conv5-ReLU-MaxPool2-Conv5-ReLU-MaxPool2-Linear-ReLU-Linear
(5 × 5 convolutions with 'same' padding, 2 × 2 max-pooling, one scalar output) with layerwise Gaussian
weights W ~ N(0, σ_w² / fan_in) and biases b ~ N(0, σ_b²) (the official code's defaults: σ_w² = 2,
σ_b² = 0.01, 16 channels and 16 hidden units). Max-pooling leaves no closed form (Novak et al. 2019), so
the kernel is estimated from S random networks:

    κ_S(x, x') = (1/S) Σ_s g(x, θ_s) g(x', θ_s) = φ(x) · φ(x') / S,     φ(x) = [g(x, θ_1), …, g(x, θ_S)].

:func:`cnn_gp_features` returns φ(X) [N, S]; wrap it in a :class:`FeatureKernel` or form the Gram matrix
of the training images (``PrecomputedGram``), as Algorithm 1 does. κ_S converges to κ at rate 1/√S.
"""

from __future__ import annotations

from typing import List, Sequence

import numpy as np
import tensorflow as tf

__all__ = ["sample_cnn_weights", "cnn_forward", "cnn_gp_features"]


def sample_cnn_weights(
    rng: np.random.Generator,
    channels: Sequence[int] = (16, 16),
    hidden: int = 16,
    kernel_size: int = 5,
    image_shape: Sequence[int] = (28, 28),
    weight_variance: float = 2.0,
    bias_variance: float = 0.01,
) -> List[np.ndarray]:
    """One draw θ ~ p(θ): [W1 [k, k, 1, c1], b1 [c1], W2 [k, k, c1, c2], b2 [c2], W3 [F, h], b3 [h], W4 [h, 1], b4 [1]]
    with F = c2 · (H/4) · (W/4); W ~ N(0, σ_w²/fan_in), b ~ N(0, σ_b²)."""
    c1, c2 = (int(c) for c in channels)
    H, W = (int(s) for s in image_shape)
    if H % 4 or W % 4:
        raise ValueError(f"the image sides must be multiples of 4 (two 2 × 2 poolings), got {tuple(image_shape)}")
    k = int(kernel_size)
    shapes = [(k, k, 1, c1), (k, k, c1, c2), (c2 * (H // 4) * (W // 4), int(hidden)), (int(hidden), 1)]
    weights = []
    for shape in shapes:
        fan_in = int(np.prod(shape[:-1]))
        weights.append(rng.normal(0.0, np.sqrt(weight_variance / fan_in), shape))
        weights.append(rng.normal(0.0, np.sqrt(bias_variance), shape[-1]))
    return weights


def cnn_forward(images: tf.Tensor, weights: Sequence[np.ndarray]) -> tf.Tensor:
    """g(x, θ) for images [N, H, W] (float32 compute): [N]."""
    W1, b1, W2, b2, W3, b3, W4, b4 = (tf.constant(w, tf.float32) for w in weights)
    h = tf.nn.relu(tf.nn.conv2d(images[..., None], W1, strides=1, padding="SAME") + b1)
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.nn.relu(tf.nn.conv2d(h, W2, strides=1, padding="SAME") + b2)
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.reshape(h, [tf.shape(h)[0], -1])
    h = tf.nn.relu(tf.matmul(h, W3) + b3)
    return tf.reshape(tf.matmul(h, W4) + b4, [-1])


def cnn_gp_features(images, num_samples: int, seed: int = 0, batch_size: int = 2000, print_every: int = 0, **architecture) -> np.ndarray:
    """φ(X) = [g(X, θ_1), …, g(X, θ_S)] [N, S] (float64) for images [N, H, W] (or [N, H·W] with a
    square side), θ_s drawn by :func:`sample_cnn_weights` from ``np.random.default_rng((seed, s))``, so
    the same (seed, s) gives the same network on any call (training and test images agree)."""
    images = np.asarray(images, dtype=np.float32)
    if images.ndim == 2:
        side = int(round(np.sqrt(images.shape[1])))
        if side * side != images.shape[1]:
            raise ValueError(f"flattened images must be square, got {images.shape[1]} pixels")
        images = images.reshape(-1, side, side)
    if images.ndim != 3 or images.shape[0] == 0:
        raise ValueError(f"images must have shape [N, H, W] or [N, H·W], got {images.shape}")
    if not np.all(np.isfinite(images)):
        raise ValueError("the images contain NaN or inf")
    if int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
    architecture.setdefault("image_shape", images.shape[1:])
    features = np.empty((images.shape[0], int(num_samples)))
    for s in range(int(num_samples)):
        weights = sample_cnn_weights(np.random.default_rng((seed, s)), **architecture)
        for start in range(0, images.shape[0], batch_size):
            block = tf.constant(images[start : start + batch_size])
            features[start : start + batch_size, s] = cnn_forward(block, weights).numpy()
        if print_every and (s + 1) % print_every == 0:
            print(f"CNN-GP features: {s + 1}/{num_samples} random networks", flush=True)
    return features
