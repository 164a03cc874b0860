"""VaDE: variational deep embedding with a Gaussian-mixture prior (Jiang et al., IJCAI 2017).

Generative model: ``c ~ Cat(pi)``, ``z | c ~ N(mu_c, diag(sigma2_c))``, ``x | z ~ p(x | f(z))``
(Bernoulli or unit-variance Gaussian). Inference network ``q(z | x) = N(mu(x), diag(sigma2(x)))``
and ``q(c | x) ~= p(c | z) = pi_c N(z; mu_c, sigma2_c) / sum_k pi_k N(z; mu_k, sigma2_k)``.
Training maximises the ELBO

    E_q[log p(x | z)] - sum_c gamma_c KL(q(z|x) || p(z|c)) - KL(gamma || pi),

after autoencoder pre-training and a GMM fitted to the pre-trained latents to initialise
(pi, mu_c, sigma2_c). Pre-training is its own cached stage (``pretrain_cache``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.mixture import GaussianMixture
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from torch import nn

from pipeline.encoders.augment import random_shift_rotate
from pipeline.encoders.device import seed_everything, worker_init
from pipeline.encoders.training import COMMON_CONSTRAINTS, TorchEncoder, adam, check_fitted
from pipeline.validation import InvalidInputError, check_float32_range, check_matrix, check_n_features

logger = logging.getLogger(__name__)


class VaDENet(nn.Module):
    """Encoder ``d -> hidden_dims -> (mu, logvar)``, mirrored decoder and the mixture prior.

    With ``hidden_dims=(500, 500, 2000)`` this is the paper's network: three ReLU layers
    into a linear latent head, and four linear layers back to the input.
    """

    def __init__(self, input_dim: int, hidden_dims, latent_dim: int, n_clusters: int):
        super().__init__()
        layers, prev = [], input_dim
        for width in hidden_dims:
            layers += [nn.Linear(prev, width), nn.ReLU()]
            prev = width
        self.encoder = nn.Sequential(*layers)
        self.mu = nn.Linear(prev, latent_dim)
        self.logvar = nn.Linear(prev, latent_dim)
        layers, prev = [], latent_dim
        for width in reversed(list(hidden_dims)):
            layers += [nn.Linear(prev, width), nn.ReLU()]
            prev = width
        layers.append(nn.Linear(prev, input_dim))
        self.decoder = nn.Sequential(*layers)
        self.pi_logits = nn.Parameter(torch.zeros(n_clusters))
        self.mu_c = nn.Parameter(torch.zeros(n_clusters, latent_dim))
        self.logvar_c = nn.Parameter(torch.zeros(n_clusters, latent_dim))

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and log-variance, each (batch, latent_dim)."""
        h = self.encoder(x)
        return self.mu(h), self.logvar(h)

    def log_joint(self, z: torch.Tensor) -> torch.Tensor:
        """``log pi_c + log N(z; mu_c, sigma2_c)`` up to a constant, shape (batch, K)."""
        diff = z.unsqueeze(1) - self.mu_c.unsqueeze(0)
        log_pdf = -0.5 * (self.logvar_c.unsqueeze(0) + diff.pow(2) / self.logvar_c.exp().unsqueeze(0)).sum(-1)
        return F.log_softmax(self.pi_logits, dim=0).unsqueeze(0) + log_pdf


class VaDEMeanEncoder(nn.Module):
    """Input features (n, d) -> posterior means (n, latent_dim), input scaling included.

    The differentiable path behind :meth:`VaDEEncoder.transform`: ``(x - lo) / (hi - lo)``,
    clamped to [0, 1] for a Bernoulli decoder, then the encoder layers and the mean head.

    Parameters
    ----------
    net : VaDENet
        A trained network; its encoder layers and mean head are copied and frozen.
    scale : (float, float)
        The fitted ``scale_ = (lo, hi)``.
    clamp : bool
        Clamp the scaled input to [0, 1] (``reconstruction="bernoulli"``).
    """

    def __init__(self, net: VaDENet, scale, clamp: bool):
        super().__init__()
        self.encoder = copy.deepcopy(net.encoder)
        self.mu = copy.deepcopy(net.mu)
        self.lo, self.hi, self.clamp = float(scale[0]), float(scale[1]), bool(clamp)
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.to(self.mu.weight.dtype) - self.lo) / (self.hi - self.lo)
        if self.clamp:
            x = x.clamp(0.0, 1.0)
        return self.mu(self.encoder(x))


def reconstruction_loss(logits: torch.Tensor, x: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-sample negative log-likelihood (up to constants), shape (batch,)."""
    if kind == "bernoulli":
        return F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(1)
    return 0.5 * (logits - x).pow(2).sum(1)


def negative_elbo(net: VaDENet, x: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean negative ELBO over the batch and the posterior cluster probabilities gamma (batch, K)."""
    mu, logvar = net.encode(x)
    z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
    recon = reconstruction_loss(net.decoder(z), x, kind)
    log_joint = net.log_joint(z)
    log_gamma = F.log_softmax(log_joint, dim=1)
    gamma = log_gamma.exp()
    var_c = net.logvar_c.exp().unsqueeze(0)
    kl_z = 0.5 * (gamma * (net.logvar_c.unsqueeze(0) + logvar.exp().unsqueeze(1) / var_c
                           + (mu.unsqueeze(1) - net.mu_c.unsqueeze(0)).pow(2) / var_c).sum(-1)).sum(1)
    kl_c = (gamma * (log_gamma - F.log_softmax(net.pi_logits, dim=0).unsqueeze(0))).sum(1)
    entropy_z = 0.5 * (1 + logvar).sum(1)
    return (recon + kl_z + kl_c - entropy_z).mean(), gamma


class VaDEEncoder(TorchEncoder):
    """VaDE deep clustering; latents are the posterior means ``mu(x)``.

    Parameters
    ----------
    n_clusters : int
        K, components of the mixture prior.
    latent_dim : int
        Latent size (paper: 10).
    hidden_dims : sequence of int
        Encoder widths (paper: 500, 500, 2000); the decoder mirrors them.
    pretrain_epochs, epochs : int
        Autoencoder pre-training epochs and ELBO training epochs.
    pretrain_lr, lr : float
        Adam learning rates of the two phases; ``lr`` decays by ``lr_decay`` every 10 epochs
        (``lr_schedule="step"``) or anneals to 0 along a cosine (``"cosine"``).
    pretrain_schedule : {"constant", "cosine"}
        Pre-training rate: constant, or annealed from ``pretrain_lr`` to 0 along a cosine.
    pretrain_noise : float in [0, 1)
        Denoising pre-training: each input pixel is zeroed with this probability (masking
        noise, as in DEC's stacked denoising autoencoders); the target is the clean input.
    pretrain_batch_size : int, optional
        Batch size of pre-training (None: ``batch_size``); smaller means more updates per epoch.
    augment_shift, augment_rotation : float
        Data augmentation as in DEC-DA (Guo et al., ACML 2018): every epoch, each training
        image (square grey, ``input_dim = side**2``) is shifted by up to ``augment_shift``
        pixels per axis and rotated by up to ``augment_rotation`` degrees, drawn afresh; the
        autoencoder reconstructs the augmented image. 0 and 0: no augmentation.
    augment_elbo : bool
        Augment in the ELBO phase too (otherwise pre-training only).
    prior_n_init : int
        Restarts of the diagonal GMM fitted to the pre-trained latents that initialises the
        prior; the one with the highest likelihood is kept (no labels).
    lr_schedule : {"step", "cosine"}
        ELBO-phase rate: ``lr * lr_decay ** (epoch // 10)``, or a cosine from ``lr`` to 0
        over ``epochs`` (annealing at the end of training).
    reconstruction : {"bernoulli", "gaussian"}
        Likelihood; "bernoulli" needs inputs in [0, 1] (see ``input_scaling``).
    input_scaling : {"minmax", "none"}
        "minmax" maps the training data's global range to [0, 1] (uint8 images: /255).
    pretrain_cache : object with ``load(name) -> dict | None`` and ``save(name, state, sidecar)``, optional
        Where the pre-trained autoencoder is kept, under a name made of the data, architecture,
        pre-training settings and seed (reused across ELBO runs with other settings). The
        pipeline passes :class:`pipeline.app.stores.checkpoint.StateDir` for a directory
        (``encoder.params.pretrain_cache=<dir>``); this class never touches files.
    n_init : int
        Seeds ``random_state, random_state+1, ...`` trained; the lowest final loss is kept.
    collapse_threshold : float
        Occupancy share above which an epoch is reported as a cluster collapse.
    resume_from : dict, optional
        A full-state :meth:`checkpoint_state` to continue ELBO training from (read a checkpoint
        file with :func:`pipeline.app.stores.checkpoint.read_checkpoint`). Periodic checkpoints:
        ``fit(epoch_callback=...)``.
    device, amp, batch_size, num_workers, progress, random_state
        See :class:`pipeline.encoders.training.TorchEncoder`.
    """

    name = "vade"
    architecture_params = ("n_clusters", "latent_dim", "hidden_dims")
    store_params = ("pretrain_cache",)  # a directory in the config: the app passes a store for it
    _parameter_constraints = {
        **COMMON_CONSTRAINTS,
        "latent_dim": [Interval(Integral, 1, None, closed="left")],
        "hidden_dims": [tuple],
        "pretrain_epochs": [Interval(Integral, 0, None, closed="left")],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "pretrain_lr": [Interval(Real, 0, None, closed="neither")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "lr_decay": [Interval(Real, 0, 1, closed="right")],
        "pretrain_schedule": [StrOptions({"constant", "cosine"})],
        "pretrain_noise": [Interval(Real, 0, 1, closed="left")],
        "pretrain_batch_size": [Interval(Integral, 2, None, closed="left"), None],
        "prior_n_init": [Interval(Integral, 1, None, closed="left")],
        "augment_shift": [Interval(Real, 0, None, closed="left")],
        "augment_rotation": [Interval(Real, 0, 180, closed="both")],
        "augment_elbo": ["boolean"],
        "lr_schedule": [StrOptions({"step", "cosine"})],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "reconstruction": [StrOptions({"bernoulli", "gaussian"})],
        "input_scaling": [StrOptions({"minmax", "none"})],
        "pretrain_cache": [HasMethods(["load", "save"]), None],
    }

    def __init__(self, n_clusters: int = 10, latent_dim: int = 10, hidden_dims=(500, 500, 2000),
                 pretrain_epochs: int = 50, epochs: int = 100, pretrain_lr: float = 1e-3, lr: float = 2e-3,
                 lr_decay: float = 0.9, weight_decay: float = 0.0, reconstruction: str = "bernoulli",
                 input_scaling: str = "minmax", pretrain_cache=None, batch_size: int = 128,
                 n_init: int = 1, random_state: int = 0, device: str = "auto", amp: bool = False,
                 num_workers: int = 0, progress: bool = True, collapse_threshold: float = 0.8,
                 resume_from: dict | None = None, pretrain_schedule: str = "constant",
                 pretrain_noise: float = 0.0, pretrain_batch_size: int | None = None, prior_n_init: int = 3,
                 lr_schedule: str = "step", augment_shift: float = 0.0, augment_rotation: float = 0.0,
                 augment_elbo: bool = False):
        self.n_clusters = n_clusters
        self.latent_dim = latent_dim
        self.hidden_dims = hidden_dims
        self.pretrain_epochs = pretrain_epochs
        self.epochs = epochs
        self.pretrain_lr = pretrain_lr
        self.lr = lr
        self.lr_decay = lr_decay
        self.weight_decay = weight_decay
        self.reconstruction = reconstruction
        self.input_scaling = input_scaling
        self.pretrain_cache = pretrain_cache
        self.batch_size = batch_size
        self.n_init = n_init
        self.random_state = random_state
        self.device = device
        self.amp = amp
        self.num_workers = num_workers
        self.progress = progress
        self.collapse_threshold = collapse_threshold
        self.resume_from = resume_from
        self.pretrain_schedule = pretrain_schedule
        self.pretrain_noise = pretrain_noise
        self.pretrain_batch_size = pretrain_batch_size
        self.prior_n_init = prior_n_init
        self.lr_schedule = lr_schedule
        self.augment_shift = augment_shift
        self.augment_rotation = augment_rotation
        self.augment_elbo = augment_elbo

    def _check_common_params(self) -> None:
        super()._check_common_params()
        widths = list(self.hidden_dims)
        if not all(isinstance(w, Integral) and not isinstance(w, bool) and w >= 1 for w in widths):
            raise InvalidInputError(f"hidden_dims must be positive integers (paper: [500, 500, 2000]), got {widths}; "
                                    "set encoder.params.hidden_dims.")

    def _augmenting(self) -> bool:
        return float(self.augment_shift) > 0 or float(self.augment_rotation) > 0

    def _augment(self, xb: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``xb`` shifted and rotated at random (DEC-DA), or ``xb`` itself without augmentation."""
        if not self._augmenting():
            return xb
        side = math.isqrt(xb.shape[1])
        if side * side != xb.shape[1]:
            raise InvalidInputError(f"augment_shift / augment_rotation need square grey images (n_features = side**2), "
                                    f"got {xb.shape[1]} features; set encoder.params.augment_shift=0 and "
                                    "encoder.params.augment_rotation=0.")
        return random_shift_rotate(xb, side, self.augment_shift, self.augment_rotation, generator)

    # ---- data -------------------------------------------------------------------------
    def _prepare(self, X, fitting: bool) -> torch.Tensor:
        if isinstance(X, list):
            raise InvalidInputError("VaDE needs numeric data, got a list (texts?); embed texts with encoder=sbert.")
        arr = np.asarray(X)
        if arr.ndim >= 2 and arr.shape[0] == 0 or arr.size == 0:
            raise InvalidInputError("VaDE got an empty dataset (0 samples); check the dataset / subset config.")
        is_uint8 = arr.dtype == np.uint8
        arr = check_matrix(arr.reshape(len(arr), -1) if arr.ndim > 2 else arr, "X", dtype=np.float64)
        with np.errstate(over="ignore"):
            narrow = arr.astype(np.float32)
        # finite data beyond float32's range (1e300) stays float64 until min-max scaled
        arr = narrow if np.all(np.isfinite(narrow)) else arr
        if self.reconstruction not in ("bernoulli", "gaussian"):
            raise InvalidInputError(f"reconstruction must be 'bernoulli' or 'gaussian', got {self.reconstruction!r}.")
        if self.input_scaling not in ("minmax", "none"):
            raise InvalidInputError(f"input_scaling must be 'minmax' or 'none', got {self.input_scaling!r}.")
        if fitting:
            self.input_shape_ = (arr.shape[1],)
            if self.input_scaling == "minmax":
                lo, hi = (0.0, 255.0) if is_uint8 else (float(arr.min()), float(arr.max()))
                self.scale_ = (lo, hi if hi > lo else lo + 1.0)
            else:
                self.scale_ = (0.0, 1.0)
        else:
            check_n_features(arr, self.input_shape_[0])
        lo, hi = self.scale_
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = (arr - lo) / (hi - lo)
            narrow = scaled.astype(np.float32)
        if not np.all(np.isfinite(narrow)):
            check_float32_range(arr, narrow, "X", f" (scaled by the fitted input range [{lo:.3g}, {hi:.3g}])")
        arr = scaled
        if self.reconstruction == "bernoulli":
            if fitting and (arr.min() < 0 or arr.max() > 1):
                raise InvalidInputError("reconstruction='bernoulli' needs inputs in [0, 1]; set encoder.input_scaling="
                                        "minmax or encoder.reconstruction=gaussian.")
            arr = np.clip(arr, 0.0, 1.0)
        return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))

    def _architecture(self) -> dict:
        return {"encoder": self.name, "input_dim": int(self.input_shape_[0]), "n_clusters": int(self.n_clusters),
                "latent_dim": int(self.latent_dim), "hidden_dims": [int(h) for h in self.hidden_dims]}

    def _build_module(self) -> VaDENet:
        return VaDENet(self.input_shape_[0], [int(h) for h in self.hidden_dims], int(self.latent_dim),
                       int(self.n_clusters))

    def _extra_state(self) -> dict:
        return {"scale": [float(v) for v in self.scale_]}

    def _load_extra_state(self, extra: dict) -> None:
        if "scale" in extra:
            self.scale_ = tuple(extra["scale"])

    def _loader(self, data: torch.Tensor, generator: torch.Generator, shuffle: bool = True, batch_size=None):
        return torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(data), batch_size=int(batch_size or self.batch_size), shuffle=shuffle,
            generator=generator, num_workers=int(self.num_workers), worker_init_fn=worker_init)

    # ---- training ---------------------------------------------------------------------
    def _fit_single(self, data: torch.Tensor, generator: torch.Generator, resume: bool) -> None:
        if not resume:
            self.module_ = self._build_module().to(self.device_)
            self._init_output_bias(data)
            self._pretrain(data, generator)
            self._init_prior(data)
            # fresh RNG streams for the ELBO phase: identical whether pre-training ran or was cached
            generator = seed_everything(self.seed_ + 104_729)
            self._generator = generator  # the stream an epoch checkpoint must capture to resume exactly
        net = self.module_
        opt = self._make_optimizer(net.parameters(), float(self.lr))

        def run_epoch(epoch):
            for group in opt.param_groups:  # a function of the epoch index only: resuming keeps it
                group["lr"] = self._elbo_lr(epoch)
            net.train()
            total, labels = 0.0, []
            for (xb,) in self._loader(data, generator):
                xb = xb.to(self.device_)
                if self.augment_elbo:
                    xb = self._augment(xb, generator)
                loss, gamma = self._optimise(opt, lambda: negative_elbo(net, xb, self.reconstruction))
                total += loss * len(xb)
                labels.append(gamma.argmax(1).cpu().numpy())
            return total / len(data), np.concatenate(labels)

        self._run_epochs(self.main_phase, int(self.epochs), run_epoch)

    def _elbo_lr(self, epoch: int) -> float:
        """The ELBO phase's rate in (0-based) ``epoch``: step decay or cosine annealing."""
        if self.lr_schedule == "cosine":
            return float(self.lr) * 0.5 * (1.0 + math.cos(math.pi * epoch / int(self.epochs)))
        return float(self.lr) * float(self.lr_decay) ** (epoch // 10)

    def _pretrain_lr(self, epoch: int) -> float:
        if self.pretrain_schedule == "cosine":
            return float(self.pretrain_lr) * 0.5 * (1.0 + math.cos(math.pi * epoch / int(self.pretrain_epochs)))
        return float(self.pretrain_lr)

    def _pretrain_key(self, data: torch.Tensor) -> str:
        spec = {"arch": self._architecture(), "epochs": self.pretrain_epochs, "lr": self.pretrain_lr,
                "batch_size": self.batch_size, "reconstruction": self.reconstruction, "seed": self.seed_,
                "scaling": self.input_scaling}
        recipe = {"schedule": self.pretrain_schedule, "noise": float(self.pretrain_noise),
                  "pretrain_batch_size": self.pretrain_batch_size}
        if self._augmenting():
            recipe["augment"] = [float(self.augment_shift), float(self.augment_rotation)]
        if recipe != {"schedule": "constant", "noise": 0.0, "pretrain_batch_size": None}:
            spec["recipe"] = recipe  # keys of caches written before these options stay valid
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
        digest.update(data.numpy().tobytes())
        return digest.hexdigest()[:20]

    def _pretrain(self, data: torch.Tensor, generator: torch.Generator) -> None:
        """Deterministic autoencoder pre-training (x -> mu(x) -> x); cached when ``pretrain_cache`` is set."""
        net = self.module_
        ae_params = [p for n, p in net.named_parameters() if n.split(".")[0] in ("encoder", "mu", "decoder")]
        store = self.pretrain_cache
        name = f"vade-ae-{self._pretrain_key(data)}" if store is not None else None
        state = store.load(name) if store is not None else None
        if state is not None:
            net.load_state_dict(state["module"], strict=False)
            self.history_.extend(state["history"])
            logger.info("VaDE: loaded cached autoencoder pre-training %s", name)
            return
        opt = adam(ae_params, lr=float(self.pretrain_lr))

        noise = float(self.pretrain_noise)

        def run_epoch(epoch):
            for group in opt.param_groups:
                group["lr"] = self._pretrain_lr(epoch)
            net.train()
            total = 0.0
            for (xb,) in self._loader(data, generator, batch_size=self.pretrain_batch_size):
                xb = self._augment(xb.to(self.device_), generator)
                xin = xb * (torch.rand(xb.shape, generator=generator).to(self.device_) >= noise) if noise else xb
                loss, _ = self._optimise(opt, lambda: (
                    reconstruction_loss(net.decoder(net.encode(xin)[0]), xb, self.reconstruction).mean(), None))
                total += loss * len(xb)
            return total / len(data), None

        self._run_epochs("pretrain", int(self.pretrain_epochs), run_epoch)
        if store is not None:
            ae_state = {k: v for k, v in net.state_dict().items() if k.split(".")[0] in ("encoder", "mu", "decoder")}
            history = [h for h in self.history_ if h["phase"] == "pretrain"]
            store.save(name, {"module": ae_state, "history": history},
                       {"stage": "vade-pretrain", "architecture": self._architecture(), "seed": self.seed_})
            logger.info("VaDE: cached autoencoder pre-training %s", name)

    @torch.no_grad()
    def _init_output_bias(self, data: torch.Tensor) -> None:
        """Start the decoder at the mean image (Bernoulli: its logit): pre-training then spends
        its first epochs on structure rather than on learning the average intensity (with the
        default zero-mean init the AE sits on that plateau for several epochs of 5,000 digits)."""
        mean = data.mean(0).to(self.device_)
        if self.reconstruction == "bernoulli":
            mean = mean.clamp(1e-3, 1 - 1e-3)
            mean = torch.log(mean / (1 - mean))
        self.module_.decoder[-1].bias.copy_(mean)

    @torch.no_grad()
    def _selection_loss(self, data: torch.Tensor) -> float:
        """Negative ELBO over the whole training set (3 draws of z from fixed seeds), the
        label-free criterion that picks among the ``n_init`` seeds."""
        net = self.module_
        net.eval()
        state = torch.get_rng_state()
        torch.manual_seed(0)
        try:
            total = 0.0
            for _ in range(3):
                for xb in data.split(1024):
                    total += float(negative_elbo(net, xb.to(self.device_), self.reconstruction)[0]) * len(xb)
        finally:
            torch.set_rng_state(state)
        return total / (3 * len(data))

    @torch.no_grad()
    def _init_prior(self, data: torch.Tensor) -> None:
        """Fit a diagonal GMM to the pre-trained latent means and copy it into the prior."""
        z = self._embed(data).astype(np.float64)
        gmm = GaussianMixture(int(self.n_clusters), covariance_type="diag", random_state=self.seed_,
                              reg_covar=1e-4, n_init=int(self.prior_n_init)).fit(z)
        net = self.module_
        net.pi_logits.copy_(torch.as_tensor(np.log(gmm.weights_), dtype=torch.float32))
        net.mu_c.copy_(torch.as_tensor(gmm.means_, dtype=torch.float32))
        net.logvar_c.copy_(torch.as_tensor(np.log(gmm.covariances_), dtype=torch.float32))
        # Start q(z|x) narrow relative to the clusters (the log-variance head was not pre-trained),
        # so the first ELBO epochs do not blur the pre-trained cluster structure.
        net.logvar.weight.zero_()
        net.logvar.bias.copy_(torch.as_tensor(np.log(0.1 * gmm.covariances_.mean(0)), dtype=torch.float32))

    # ---- inference --------------------------------------------------------------------
    @torch.no_grad()
    def _embed(self, data: torch.Tensor) -> np.ndarray:
        self.module_.eval()
        out = [self.module_.encode(xb.to(self.device_))[0].cpu() for xb in data.split(4096)]
        return torch.cat(out).numpy().astype(np.float32)

    @torch.no_grad()
    def _assign(self, data: torch.Tensor) -> np.ndarray:
        z = torch.from_numpy(self._embed(data)).to(self.device_)
        return self.module_.log_joint(z).argmax(1).cpu().numpy().astype(np.int64)

    def predict_proba(self, X) -> np.ndarray:
        """Posterior cluster probabilities p(c | mu(x)), shape (n_samples, n_clusters)."""
        check_fitted(self)
        z = torch.from_numpy(self._embed(self._prepare(X, fitting=False))).to(self.device_)
        with torch.no_grad():
            return F.softmax(self.module_.log_joint(z), dim=1).cpu().numpy().astype(np.float64)

    def torch_module(self) -> VaDEMeanEncoder:
        """The encoder's mean path with its input scaling, as a frozen CPU module (n, d) -> (n, latent_dim)."""
        check_fitted(self)
        return VaDEMeanEncoder(self.module_, self.scale_, self.reconstruction == "bernoulli").cpu().eval()

    def mixture(self):
        """``(weights (K,), means (K, latent_dim), covariances (K, latent_dim, latent_dim))`` of the prior."""
        check_fitted(self)
        net = self.module_
        weights = F.softmax(net.pi_logits.detach(), 0).cpu().numpy().astype(np.float64)
        means = net.mu_c.detach().cpu().numpy().astype(np.float64)
        variances = net.logvar_c.detach().exp().cpu().numpy().astype(np.float64)
        return weights, means, np.stack([np.diag(v) for v in variances])
