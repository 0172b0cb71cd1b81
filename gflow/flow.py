"""The integrator: exact gradient flow, one adaptive step or one event per iteration.

A batch of trajectories runs as one ``lax.while_loop``. Each iteration, every member
that is still running either

- attempts one step of a Diffrax Runge–Kutta solver under a Diffrax PID controller
  (rejected steps shrink and retry; for depth-2 networks the explicit solvers' stages
  are written out from Diffrax's Butcher tableau, :func:`_explicit_rk`), and checks the
  event guards of *all* pre-activations at the step's end and at ``event_samples − 1``
  interior points of the solver's dense interpolant; if a guard changes sign the
  earliest crossing is located by Illinois root finding on the interpolant, the step is
  not taken, and the next iteration steps exactly to the crossing; or
- takes that forced step to the crossing and resolves the crossing there
  (:func:`gflow.kinks.resolve`; depth 2: :meth:`gflow.events.System.handle`):
  transversal, sliding (Filippov), touch.

With ``events="through"`` (``Config.through``) the field takes its slopes from the sign
of each pre-activation at the point of evaluation (plain ReLU autodiff, ``σ'(0) = 0``;
first-layer neurons inactive at every point at the step's start keep slope 0), no step
stops at a kink, and sign changes between the dense samples are recorded as
crossings, timed by linear interpolation between samples. With ``solver="kvaerno5"``
the step is implicit (for stiff stretches, such as weight decay near a stationary point).

The state carries one entry more than θ: ``E(t) = ∫₀ᵗ ‖θ̇‖²``, integrated with the same
stages and outside the step-size control, so that every trajectory checks the energy
identity ``L(θ(0)) − L(θ(t)) = E(t)`` (:attr:`gflow.Solution.energy_defect`).

So the batch costs as many iterations as its longest member needs steps plus events,
not the sum over event segments of per-segment maxima. The expensive branches (root
finding, event handling, equivalent controls, saving) run under ``lax.cond`` on a
batch-wide predicate, so they cost nothing in iterations where no member needs them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from . import events as ev
from . import kinks
from .events import _noise
from .networks import written_out_below
from .solution import Status

_SOLVERS = {"dopri8": diffrax.Dopri8, "dopri5": diffrax.Dopri5, "tsit5": diffrax.Tsit5, "kvaerno5": diffrax.Kvaerno5}
_IMPLICIT = ("kvaerno5",)


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that fixes the compiled program (one compile per Config and shape)."""

    loss: str
    solver: str
    shapes: tuple
    n: int
    max_events: int
    max_sliding: int
    event_samples: int
    n_save: int
    use_gtol: bool
    use_ltol: bool
    lanes: int
    pcoeff: float
    icoeff: float
    through: bool = False
    use_dtol: bool = False
    follow: bool = False  # tolerances also held to a fraction of the motion left (motion_tol)

    @property
    def hidden_widths(self):
        return tuple(s[0] for s in self.shapes[:-1])


class _State(NamedTuple):
    t: jax.Array
    y: jax.Array
    mode: jax.Array
    control: jax.Array
    dt: jax.Array
    dt_resume: jax.Array
    pid: tuple
    fsal: object
    made_jump: jax.Array
    forced: jax.Array
    pending: jax.Array
    armed: jax.Array
    ev_t: jax.Array
    ev_k: jax.Array
    ev_kind: jax.Array
    ev_dir: jax.Array
    n_ev: jax.Array
    saved: jax.Array
    save_i: jax.Array
    n_acc: jax.Array
    n_rej: jax.Array
    n_iter: jax.Array
    status: jax.Array
    slot: jax.Array
    mode0: jax.Array
    unresolved: jax.Array
    tolf: jax.Array  # the factor on rtol and atol (motion_tol; 1 without it)
    jump: jax.Array  # the loss change of the moves onto the surfaces, summed (_onto_surfaces)
    data: tuple


def _unravel_for(shapes):
    sizes = [a * b for a, b in shapes]
    offsets = np.cumsum([0] + sizes)

    def unravel(y):
        return [y[o : o + s].reshape(shape) for o, s, shape in zip(offsets[:-1], sizes, shapes)]

    return unravel


def ravel(params):
    """Flatten ``[W_1, ..., W_k]`` (each with the same leading axes) to ``(..., D)``."""
    return np.concatenate([np.reshape(W, W.shape[:-2] + (-1,)) for W in params], axis=-1)


@functools.lru_cache(maxsize=64)
def compiled(cfg: Config):
    """The jitted batch integrator for one configuration, and its :class:`gflow.events.System`."""
    program = _Program(cfg)
    return jax.jit(program.run), program.system


class _Call(NamedTuple):
    """What one call of the integrator fixes for every stage."""

    t1: jax.Array
    rtol: jax.Array
    atol: jax.Array
    gtol: jax.Array
    ltol: jax.Array
    dtol: jax.Array
    ts: jax.Array
    max_steps: jax.Array
    mtol: jax.Array
    solver: object
    controller: object
    L: int  # lanes
    S: int  # save times
    pid_reset: object = None  # the step controller's state at a lane's start


class _Integrand:
    """The field the solver integrates (θ and the energy integral), the event guards' view
    of sliding units, and the solver and step controller at a member's tolerances."""

    def slopes_of(self, y, data, mode, control, n_sliding, chord=None):
        """Every unit's slope. With ``events="through"`` kinks are not stopped at: the slopes
        are the ReLU derivatives at the state itself (σ'(0) = 0), so the field is the plain
        autodiff gradient and the step controller absorbs the kinks; crossings are read off
        the dense solution afterwards. A first-layer neuron inactive at every point at the
        step's start is dead for good (events.System.dead_first_layer): its slopes stay 0
        whatever the sign of its p, which weight decay takes below atol, where the solver
        leaves its sign to noise."""
        if self.cfg.through:
            live = (self.system.preacts(y, data) > 0) & ~self.system.dead_first_layer(mode)
            return live.astype(y.dtype)
        return self.system.slopes(y, data, mode, control, n_sliding, chord)

    def vector_field(self, t, y, args):
        """The state is θ followed by one more entry, E(t) = ∫₀ᵗ ‖θ̇‖² ds, which the fields
        never read (``unravel`` stops at θ): the energy identity's right side."""
        mode, control, data, n_sliding, chord = args
        f = self.system.field(y, data, self.slopes_of(y, data, mode, control, n_sliding, chord))
        return f.at[-1].set(jnp.sum(f[:-1] ** 2))

    def held_guards(self, g, p, mode, noise):
        return _held_guards(g, p, mode, noise) if self.deep else g

    def tools(self, rtol, atol):
        """The solver and the step controller at these tolerances. Both measure errors on
        θ alone: the energy entry of the state is carried, never controlled, so the steps
        (and every result) are those of the flow of θ by itself."""
        solver = self.base_solver
        if self.cfg.solver in _IMPLICIT:
            # The implicit stages' Newton (chord) iterations stop at the step tolerances.
            solver = eqx.tree_at(
                lambda s: (s.root_finder.rtol, s.root_finder.atol, s.root_finder.norm),
                solver,
                (rtol, atol, _theta_norm),
            )
        cfg = self.cfg
        controller = diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=cfg.pcoeff, icoeff=cfg.icoeff, norm=_theta_norm)
        return solver, controller

    def _tolerance_factor(self, y, loss, speed, rtol, atol, mtol):
        """The factor ``f ≤ 1`` on ``rtol`` and ``atol`` of a member at ``y``, with loss
        ``L`` and speed ``‖θ̇‖`` there (``motion_tol``; 1 without it). Near a minimum
        of loss 0, ``L ≈ ½·eᵀHe`` and ``‖θ̇‖ ≈ ‖He‖`` for the distance ``e`` to it, so
        ``2L/‖θ̇‖`` is the distance left in the loss's quadratic model (``‖e‖`` when
        ``H`` is a multiple of the identity), and the field's relative error from an
        error ``δ`` in the weights is ``δ/‖e‖``: tolerances fixed against ``‖θ‖`` decide
        the kinks by noise once ``‖e‖`` falls to their size. ``f`` holds the error unit
        ``f·(atol + rtol·‖θ‖_rms)`` at ``mtol·2L/‖θ̇‖``, never above 1 (the given
        tolerances; also wherever ``2L/‖θ̇‖`` is not small: a plateau, a stationary point
        of positive loss) nor below ``f·rtol = _RTOL_FLOOR`` (a few ulps)."""
        if not self.cfg.follow:
            return jnp.ones(())
        distance = 2.0 * jnp.maximum(loss, 0.0) / speed
        f = mtol * distance / (atol + rtol * _theta_norm(y))
        f = jnp.where(jnp.isnan(f), 1.0, f)
        return jnp.clip(f, jnp.minimum(1.0, _RTOL_FLOOR / rtol), 1.0)

    def _member_call(self, c, f):
        """``c`` at one member's tolerances ``f·rtol``, ``f·atol`` (:meth:`_tolerance_factor`)."""
        if not self.cfg.follow:
            return c
        rtol, atol = f * c.rtol, f * c.atol
        solver, controller = self.tools(rtol, atol)
        return c._replace(rtol=rtol, atol=atol, solver=solver, controller=controller)

    def interpolant(self, c, t0, t_next, dense):
        return c.solver.interpolation_cls(t0=t0, t1=t_next, **dense)


class _Run:
    """The whole call: lanes started from a queue of trajectories, iterated until every
    one has stopped, their results collected."""

    def run(self, y0, X, Y, wd, modes, count, t1, rtol, atol, gtol, ltol, dtol, ts, max_steps, mtol):
        """Integrate the first ``count`` of the ``N`` rows of ``y0`` (the rest are padding:
        never started, results left at zero, so a padded batch costs no extra work)."""
        cfg, system, P, E = self.cfg, self.system, self.P, self.E
        N, L, S = y0.shape[0], cfg.lanes, len(ts)
        loss0 = jax.vmap(system.loss)(y0, (X, Y, wd))
        y0 = jnp.concatenate([y0, jnp.zeros((N, 1), y0.dtype)], axis=1)  # θ, then E = 0
        count = jnp.minimum(jnp.asarray(count, jnp.int32), N)
        solver, controller = self.tools(rtol, atol)
        c = _Call(t1, rtol, atol, gtol, ltol, dtol, ts, max_steps, mtol, solver, controller, L, S)
        inputs = (y0, X, Y, wd, modes, t1, rtol, atol, ts, mtol)

        # Lanes are started inside the loop, at the top of the iteration after a lane
        # frees (before the first, all of them): the program holds one copy of the start
        # (its kinks at t = 0 included), where a start before the loop was a second.
        lanes0 = jnp.arange(L, dtype=jnp.int32)
        state = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(self.start_lanes, lanes0, *inputs))
        out = dict(
            y=jnp.zeros_like(y0), t=jnp.zeros(N), status=jnp.zeros(N, jnp.int32), mode=jnp.zeros((N, P), jnp.int8),
            mode0=jnp.zeros((N, P), jnp.int8), ev_t=jnp.zeros((N, E)), ev_k=jnp.zeros((N, E), jnp.int32),
            ev_kind=jnp.zeros((N, E), jnp.int32), ev_dir=jnp.zeros((N, E), jnp.int32), n_ev=jnp.zeros(N, jnp.int32),
            saved=jnp.zeros((N, S) + y0.shape[1:]), n_acc=jnp.zeros(N, jnp.int32), n_rej=jnp.zeros(N, jnp.int32),
            n_iter=jnp.zeros(N, jnp.int32), control=jnp.zeros((N, P)), tolf=jnp.ones(N), jump=jnp.zeros(N),
        )  # fmt: skip

        def body(carry):
            state, out, next_, start, pid_reset = carry
            state, next_, pid_reset = jax.lax.cond(
                jnp.any(start), functools.partial(self._start, N, count, inputs), lambda *a: a[:3],
                state, next_, pid_reset, start,
            )  # fmt: skip
            new = self._iteration(c._replace(pid_reset=pid_reset), state)
            finished = (state.status == Status.RUNNING) & (new.status != Status.RUNNING)
            out, new, take = jax.lax.cond(
                jnp.any(finished), functools.partial(self._finish, N, count, next_), lambda o, s, f: (o, s, f),
                out, new, finished,
            )  # fmt: skip
            return new, out, next_, take, pid_reset

        def more(carry):
            state, *_, start, _ = carry
            return jnp.any(state.status == Status.RUNNING) | jnp.any(start)

        carry = (state, out, jnp.int32(0), jnp.ones(L, bool), state.pid)
        _, out, *_ = jax.lax.while_loop(more, body, carry)
        data = (X, Y, wd)
        if cfg.through:
            final_slopes = lambda y, data, mode, _: self.slopes_of(y, data, mode, None, False)  # noqa: E731
        else:
            # The controls a lane ends with are those of its last state (solved at the end
            # of its last step, or by its last kink): no solve here.
            final_slopes = lambda y, data, mode, control: system.base_slopes(mode, control)  # noqa: E731
        gnorm = jax.vmap(
            lambda y, mode, control, data: jnp.linalg.norm(system.field(y, data, final_slopes(y, data, mode, control)))
        )(out["y"], out["mode"], out.pop("control"), data)
        loss = jax.vmap(system.loss)(out["y"], data)
        out["energy"], out["y"] = out["y"][:, -1], out["y"][:, :-1]
        out["saved_energy"], out["saved"] = out["saved"][..., -1], out["saved"][..., :-1]
        out["loss0"] = loss0
        return out, loss, gnorm

    def _finish(self, N, count, next_, out, state, finished):
        """Write finished lanes' results; those with a trajectory left in the queue are
        started at the top of the next iteration (``take``), the others go idle."""
        where = jnp.where(finished, state.slot, N)  # N: dropped
        out = {k: v.at[where].set(getattr(state, k), mode="drop") for k, v in out.items()}
        take = finished & (next_ + jnp.cumsum(finished, dtype=jnp.int32) - 1 < count)
        idle = finished & ~take
        state = state._replace(status=jnp.where(idle, _IDLE, state.status), slot=jnp.where(idle, N, state.slot))
        return out, state, take


class _Lanes:
    """A lane's start: its state at ``t = 0`` for the next queued trajectory."""

    def _start_lanes(self, idx, y0, X, Y, wd, modes, t1, rtol, atol, ts, mtol):
        """Lane states for trajectories ``idx`` (``(L,)``), at t = 0. Units on their surfaces
        there, and units given as sliding, are decided in the lane's first iteration
        (:meth:`_resolve`), which also solves the controls of the units given as sliding."""
        cfg, system, P, E, vmap = self.cfg, self.system, self.P, self.E, jax.vmap
        L, S = idx.shape[0], len(ts)
        solver, controller = self.tools(rtol, atol)

        def member_init(y, data, given):
            # Given modes (a continued run; checked against the signs by the caller)
            # are kept; the others follow the signs, p = 0 decided below.
            p = system.preacts(y, data)
            mode = jnp.where(given >= 0, given, jnp.where(p > 0, ev.ACTIVE, ev.INACTIVE)).astype(jnp.int8)
            # The tolerance factor from the field with the modes' slopes, sliding units at
            # slope 0 until the first iteration solves their controls (an estimate).
            speed = jnp.linalg.norm(system.field(y, data, system.base_slopes(mode, jnp.zeros(P))))
            f = self._tolerance_factor(y, system.loss(y, data), speed, rtol, atol, mtol)
            return mode, (p == 0.0) & (given < 0), jnp.abs(p) > _noise(p, f * rtol, f * atol), f

        y = y0[idx]
        data = (X[idx], Y[idx], wd[idx])
        mode, on_surface, armed, tolf = vmap(member_init)(y, data, modes[idx])
        if not cfg.through:
            # Units cut off from the data whatever the units on their surfaces below them
            # do (none at their point below them active, sliding or on its surface) are
            # inactive by σ'(0) = 0 (System.cut): no decision.
            surely_cut = vmap(lambda m, on: system.cut(jnp.where(on, ev.SLIDING, m))[0])(mode, on_surface)
            on_surface = on_surface & ~surely_cut
            # The units on their surfaces and the given sliding units are decided together
            # by the loop's kink stage (:meth:`_resolve`, ``initial``) in the lane's first
            # iteration, a forced step of length 0 at t = 0: a given sliding unit whose
            # control falls outside [0, 1] (a run continued with another field: data,
            # loss, weight decay) is no longer held by its surface and leaves there.
            first = jnp.any(on_surface | (mode == ev.SLIDING), axis=1)
        else:
            on_surface, first = jnp.zeros((L, P), bool), jnp.zeros(L, bool)
        armed = armed & (mode != ev.SLIDING)
        control = jnp.zeros((L, P))
        if self.deep and not cfg.through:
            # Units given as sliding start from control 1/2. The lane's first iteration,
            # a step of length 0, solves their controls from there (its guards), and its
            # kink stage decides them with the units on their surfaces from those
            # (kinks.resolve). A Newton solve here instead was a copy of the rates'
            # Jacobian in the program (2,204 of 20,330 operations at depth 6, width 10)
            # for the same controls to 1e-14. (Depth 2 solves them in closed form.)
            control = jnp.where(mode == ev.SLIDING, 0.5, control)

        def first_step(y, mode, data):
            # The first step's size: Diffrax's estimate from the field with the modes'
            # slopes, sliding units at slope 0 until the first iteration solves their
            # controls (an estimate; the step's error control decides). The field at the
            # step's start is computed by that step (``made_jump``).
            base = system.base_slopes(mode, jnp.zeros(P))
            slopes = (lambda y: self.slopes_of(y, data, mode, None, False)) if cfg.through else (lambda y: base)
            field = lambda _terms, _t, y, _args: system.field(y, data, slopes(y))  # noqa: E731
            return controller.init(self.terms, 0.0, t1, y, None, None, field, self.error_order)

        dt0, pid0 = vmap(first_step)(y, mode, data)
        dt0 = jnp.minimum(dt0, t1)
        if self.rk is None:  # the solver's own state; the first step computes its first stage (made_jump)
            init = lambda y, mode, data: solver.init(self.terms, 0.0, t1, y, (mode, jnp.zeros(P), data, 0, None))  # noqa: E731
            fsal0 = vmap(init)(y, mode, data)
        else:
            fsal0 = jnp.zeros_like(y)
        saved = jnp.full((L, S) + y.shape[1:], jnp.nan)
        save_i = jnp.zeros(L, jnp.int32)
        if S:
            at0 = ts[0] <= 0.0
            saved = saved.at[:, 0].set(jnp.where(at0, y, jnp.nan))
            save_i = save_i + at0.astype(jnp.int32)
        zeros_i = jnp.zeros(L, jnp.int32)
        return _State(
            t=jnp.zeros(L), y=y, mode=mode, control=control, dt=jnp.where(first, 0.0, dt0), dt_resume=dt0,
            pid=jax.tree.map(lambda a: jnp.broadcast_to(a, (L,) + jnp.shape(a)[1:]), pid0), fsal=fsal0,
            made_jump=jnp.ones(L, bool), forced=first, pending=on_surface, armed=armed,
            ev_t=jnp.full((L, E), jnp.nan), ev_k=jnp.full((L, E), -1, jnp.int32),
            ev_kind=jnp.full((L, E), -1, jnp.int32), ev_dir=jnp.zeros((L, E), jnp.int32), n_ev=zeros_i,
            saved=saved, save_i=save_i, n_acc=zeros_i, n_rej=zeros_i, n_iter=zeros_i,
            status=jnp.full(L, int(Status.RUNNING), jnp.int32), slot=idx.astype(jnp.int32),
            # mode0: the given modes until the first iteration has decided the units on
            # their surfaces and the given sliding units, then the modes it leaves.
            mode0=mode, unresolved=jnp.zeros(L, bool), tolf=tolf, jump=jnp.zeros(L), data=data,
        )  # fmt: skip

    def _start(self, N, count, inputs, state, next_, pid_reset, start):
        """Start the next queued trajectories in the lanes ``start``, in lane order. A lane
        left without one (the first start, with fewer trajectories than lanes) integrates a
        copy of the last and is idle: its results are never written."""
        queue = next_ + jnp.cumsum(start, dtype=jnp.int32) - 1
        take = start & (queue < count)
        fresh = self.start_lanes(jnp.clip(queue, 0, jnp.maximum(count - 1, 0)).astype(jnp.int32), *inputs)
        state = jax.tree.map(lambda f, o: jnp.where(_bcast(start, f), f, o), fresh, state)
        state = state._replace(
            status=jnp.where(start & ~take, _IDLE, state.status), slot=jnp.where(start & ~take, N, state.slot)
        )
        # The step controller's state at a lane's start: the same for every lane.
        return state, next_ + jnp.sum(take, dtype=jnp.int32), fresh.pid


class _Step:
    """**Step**: one iteration of every running lane, and each member's solver step with
    its event guards."""

    def _iteration(self, c, s: _State):
        """One iteration of every running lane: step, locate, resolve, advance, stop."""
        cfg, system, vmap = self.cfg, self.system, jax.vmap
        data = s.data
        running = s.status == Status.RUNNING
        n_sliding = jnp.max(jnp.sum((s.mode == ev.SLIDING) & running[:, None], axis=1))
        if self.rk is not None:
            s = s._replace(fsal=self._first_stage(s, running, n_sliding))
        # Deep networks: one Jacobian of the sliding rates per step, at its start, for
        # the sliding controls of all its stages and guards (System.chord).
        chord = None
        if not cfg.through:
            chord = vmap(system.chord, in_axes=(0, 0, 0, 0, None))(s.y, data, s.mode, s.control, n_sliding)
        # Step.
        o = vmap(functools.partial(self._attempt, c), in_axes=(0, 0, None, 0))(s, data, n_sliding, chord)
        has_event = o["has_event"] & running
        accept = o["keep"] & ~has_event & o["finite"]
        forced_done = accept & s.forced
        if cfg.through:
            t_e, new_pending = o["hi"], s.pending
            kinks = self._crossings_through(c, s, o, accept & running)
        else:
            # Locate, then resolve the kinks at the end of forced steps.
            t_e, new_pending = self._locate(c, s, o, has_event, n_sliding, chord)
            kinks = self._resolve(c, s, o, forced_done & running, forced_done)
            # After an ordinary accepted step the sliding controls at its end (solved
            # for its last guard) warm-start the next step's equivalent controls.
            kinks = kinks._replace(control=jnp.where((accept & ~s.forced)[:, None], o["control1"], kinks.control))
        new = self._advance(c, s, o, kinks, t_e, new_pending, has_event, accept, forced_done, n_sliding, chord)
        return jax.tree.map(lambda a, b: jnp.where(_bcast(running, a), a, b), new, s)

    def _first_stage(self, s, running, n_sliding):
        """The first stage is the field at the step's start: carried over from the last
        accepted step (first same as last) unless a forced step changed modes."""
        fresh = s.made_jump & running
        fields = jax.vmap(self.vector_field, in_axes=(0, 0, (0, 0, 0, None, None)))
        return jax.lax.cond(
            jnp.any(fresh),
            lambda: jnp.where(fresh[:, None], fields(s.t, s.y, (s.mode, s.control, s.data, n_sliding, None)), s.fsal),
            lambda: s.fsal,
        )

    def _attempt(self, c, s, data, n_sliding, chord):
        """One member's step: the solver's step and its error control, then the event guards
        at the step's start, ``event_samples − 1`` interior points of the dense interpolant
        and its end; the first interval in which a guard changes sign."""
        cfg, system, M = self.cfg, self.system, self.M
        c = self._member_call(c, s.tolf)
        h = jnp.where(s.forced, s.dt, jnp.minimum(s.dt, c.t1 - s.t))
        t_next = s.t + h
        args = (s.mode, s.control, data, n_sliding, chord)
        if self.rk is None:
            y1, y_err, dense, fsal1, _ = c.solver.step(self.terms, s.t, t_next, s.y, args, s.fsal, s.made_jump)
        else:
            y1, y_err, dense, fsal1 = self.rk(s.t, t_next, s.y, args, s.fsal)
        keep, _, next_t1, _, pid1, _ = c.controller.adapt_step_size(
            s.t, t_next, s.y, y1, args, y_err, self.error_order, s.pid
        )
        finite = jnp.all(jnp.isfinite(y1)) & jnp.all(jnp.isfinite(y_err))
        # A non-finite candidate (e.g. a sliding control that becomes singular inside
        # the step) is a rejected step: retry with a quarter of the step.
        keep = keep & finite
        dt_new = jnp.where(finite, next_t1 - jnp.where(keep, t_next, s.t), 0.25 * h)
        # A forced step (to a located crossing) is taken whatever its error estimate, unless
        # the estimate says its field was garbage: then it is rejected like any other step,
        # the crossing forgotten (_advance), and the member steps again from its start.
        scale = c.atol + c.rtol * jnp.maximum(jnp.abs(s.y), jnp.abs(y1))
        sane = finite & (_theta_norm(y_err / scale) <= _FORCED_ERROR_MAX)
        # Guards at the start, interior samples and end of the step.
        interp = self.interpolant(c, s.t, t_next, dense)
        taus = s.t + h * jnp.arange(1, M) / M
        ys = jnp.concatenate([s.y[None], jax.vmap(interp.evaluate)(taus), y1[None]])
        common = dict(t_next=t_next, y1=y1, dense=dense, fsal1=fsal1, pid1=pid1, dt_new=dt_new, finite=finite)
        if cfg.through:
            # Crossings between samples of the dense solution, timed by linear
            # interpolation of the pre-activation between the two samples.
            p = jax.vmap(lambda y: system.preacts(y, data))(ys)
            pos = (p > 0) & ~system.dead_first_layer(s.mode)
            flip = pos[:-1] != pos[1:]
            t_s = jnp.concatenate([s.t[None], taus, t_next[None]])
            frac = jnp.clip(p[:-1] / jnp.where(flip, p[:-1] - p[1:], 1.0), 0.0, 1.0)
            return dict(
                common, keep=keep, has_event=jnp.zeros((), bool), lo=t_next, hi=t_next, armed=s.armed,
                flip=flip, t_cross=t_s[:-1, None] + (t_s[1:] - t_s[:-1])[:, None] * frac,
                dirs=jnp.where(pos[1:], 1, -1), mode_end=jnp.where(pos[-1], ev.ACTIVE, ev.INACTIVE).astype(s.mode.dtype),
            )  # fmt: skip
        G, C, p = jax.vmap(lambda y: system.guards(y, data, s.mode, s.control, n_sliding, chord))(ys)
        # Sliding controls that are not finite at a sample reject the step, as a non-finite
        # stage does: retry with a quarter of it. (Counted as crossings by the guards, they
        # made a depth-4 run of tests/test_flow.py::test_balance_laws spend its step budget
        # between t = 27 and 36.)
        solved = ~jnp.any(jnp.isnan(C))
        keep, finite, sane = keep & solved, finite & solved, sane & solved
        common.update(finite=finite, dt_new=jnp.where(solved, dt_new, 0.25 * h))
        G = jnp.where(jnp.isnan(G), -1.0, G)  # an undefined guard counts as crossed
        # A unit that has not yet left the round-off band since its last event fires
        # only once it is clearly past its surface (no events from noise).
        noise = _noise(jnp.where(s.mode == ev.SLIDING, 0.0, G[0]), c.rtol, c.atol)
        G = self.held_guards(G, p, s.mode, noise)
        shift = jnp.where(s.armed, 0.0, noise)
        G = G + shift
        cross = (G[:-1] > 0) & (G[1:] <= 0)
        hit = jnp.any(cross, axis=1)
        # A forced step ends at the located crossing, inside its last interval. A guard that
        # changes sign in an earlier one crossed before it, in a dip between the samples of
        # the step the crossing was located on (Scale problem, t = 0.20708: a unit's p fell
        # to −1.4e-8 and rose again within the first of its 2.4e-3 step's eight intervals,
        # and was taken to have crossed 1.5e-5 late, with the located unit): that crossing
        # is located instead, and the forced step goes to it.
        hit = jnp.where(s.forced, hit & (jnp.arange(M) < M - 1), hit)
        m = jnp.argmax(hit)
        has_event = jnp.where(s.forced, sane, keep & finite) & jnp.any(hit)
        lo = s.t + h * m / M
        hi = jnp.where(m == M - 1, t_next, s.t + h * (m + 1) / M)
        return dict(
            common, keep=keep | (s.forced & sane), has_event=has_event, lo=lo, hi=hi, cand=cross[m], G_lo=G[m], control1=C[-1],
            G_hi=G[m + 1], shift=shift, noise=noise, armed=s.armed | jnp.any(G[1:] - shift > noise, axis=0), late=G[-1] <= 0,
        )  # fmt: skip

    def _crossings_through(self, c, s, o, done):
        """``events="through"``: record the sign changes found between the samples."""
        L, P, M = c.L, self.P, self.M
        records = [
            (o["flip"][:, m] & done[:, None], jnp.full((L, P), int(ev.Kind.CROSS), jnp.int32), o["dirs"][:, m])
            for m in range(M)
        ]  # fmt: skip
        ev_t, ev_k, ev_kind, ev_dir, n_ev = jax.lax.cond(
            jnp.any(o["flip"] & done[:, None, None]),
            lambda: self._write(records, [o["t_cross"][:, m] for m in range(M)], s.ev_t, s.ev_k, s.ev_kind, s.ev_dir, s.n_ev),
            lambda: (s.ev_t, s.ev_k, s.ev_kind, s.ev_dir, s.n_ev),
        )  # fmt: skip
        mode = jnp.where(done[:, None], o["mode_end"], s.mode)
        kinks = (mode, s.control, s.pending, s.unresolved, s.pending, o["y1"], jnp.zeros(L))
        return _Kinks(*kinks, ev_t, ev_k, ev_kind, ev_dir, n_ev)


class _Locate:
    """**Locate**: the earliest crossing of the members whose guards changed sign."""

    def _locate(self, c, s, o, has_event, n_sliding, chord):
        """The time of the earliest crossing of the members whose guards changed sign, and
        the units crossing there. The guards of units off their surfaces do not depend on
        the sliding controls (held units output exactly 0 to the layers above): locating
        an event solves the controls only if some candidate slides."""
        slides = o["cand"] & (s.mode == ev.SLIDING) & has_event[:, None]
        locate_sliding = jnp.where(jnp.any(slides), n_sliding, 0)
        member = functools.partial(self._member_locate, c)
        return jax.lax.cond(
            jnp.any(has_event),
            lambda: jax.vmap(member, in_axes=(0, 0, 0, None, 0))(s, o, s.data, locate_sliding, chord),
            lambda: (o["hi"], jnp.zeros((c.L, self.P), bool)),
        )

    def _member_locate(self, c, s, o, data, n_sliding, chord):
        """Illinois on H(τ) = min over candidates of their guards; keeps H(lo) > 0 ≥ H(hi).

        A unit that has not left its round-off band since its last event fires only a band
        past its surface (``o["shift"]``), yet it crossed where its guard reached 0: after
        coming back through its surface inside the band (depth 4: a unit crossed to its
        active side, its ``p`` rose to 8e-9 and came back through 0 within one step, and
        its slide started 2.9e-5 late, the rate there being 4e-5). Such units are then timed
        at their surfaces: probes back from the band's edge, each twice as far as the last
        (from one band-width over the samples' slope, which a curved guard makes 200 times
        too steep there), find a time where their unshifted guards are positive, and Illinois
        locates the zero between. If none does before the step's start (the unit never left
        its surface), the band's edge stands. One loop and one call of the guards (their
        compiled size): ``phase`` 0 locates the band's edge, 1 probes back, 2 locates the
        zero, 3 is done at the band's edge, 4 at the zero."""
        system = self.system
        interp = self.interpolant(c, s.t, o["t_next"], o["dense"])

        def guards(tau, shift):
            y = interp.evaluate(tau)
            g, _, p = system.guards(y, data, s.mode, s.control, n_sliding, chord)
            return self.held_guards(jnp.where(jnp.isnan(g), -1.0, g), p, s.mode, o["noise"]) + shift

        def low(g, mask):
            return jnp.min(jnp.where(mask, g, jnp.inf))

        f_lo, f_hi = low(o["G_lo"], o["cand"]), low(o["G_hi"], o["cand"])
        slope = jnp.maximum((f_lo - f_hi) / (o["hi"] - o["lo"]), jnp.finfo(jnp.float64).tiny)
        tol = 4 * jnp.finfo(jnp.float64).eps * jnp.maximum(jnp.abs(o["hi"]), 1.0)

        def cond(carry):
            *_, phase, it, _ = carry
            return (phase < 3) & (it < 200) & o["has_event"]

        def body(carry):
            lo, hi, f_lo, f_hi, g_hi, side, mask, shift, edge, at_edge, phase, it, k = carry
            tau = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
            # Every third iteration, or when the secant leaves the bracket, bisect.
            bad = ~jnp.isfinite(tau) | (tau <= lo) | (tau >= hi) | (it % 3 == 2)
            tau = jnp.where(bad, 0.5 * (lo + hi), tau)
            probing = phase == 1
            tau = jnp.where(probing, jnp.maximum(s.t, hi - 2.0**k * o["noise"] / slope), tau)
            g = guards(tau, shift)
            f = low(g, mask)
            right, found = f <= 0, (f > 0) & probing
            # Illinois: halve the retained end's value when the same side is kept twice
            # (a probe keeps no side).
            lo, f_lo = jnp.where(right, lo, tau), jnp.where(right, jnp.where(side == 1, 0.5 * f_lo, f_lo), f)
            hi, f_hi = jnp.where(right, tau, hi), jnp.where(right, f, jnp.where(side == -1, 0.5 * f_hi, f_hi))
            g_hi, side = jnp.where(right, g, g_hi), jnp.where(probing, 0, jnp.where(right, 1, -1))
            # The band's edge located (then probe back if a unit there is not armed), a probe
            # on the positive side (then locate the zero) or none left, the zero located.
            converged = (hi - lo <= tol) & ~probing
            first = converged & (phase == 0)
            banded = mask & (g_hi <= 0) & (shift > 0)
            to_probe = first & jnp.any(banded)
            edge, at_edge = jnp.where(first, hi, edge), jnp.where(first, mask & (g_hi <= 0), at_edge)
            mask, g_hi = jnp.where(to_probe, banded, mask), jnp.where(to_probe, g_hi - shift, g_hi)
            f_hi, shift = jnp.where(to_probe, low(g_hi, mask), f_hi), jnp.where(to_probe, 0.0, shift)
            given_up = probing & ~found & ((k + 1 >= _BACK_PROBES) | (tau <= s.t))
            phase = jnp.select(
                [to_probe, first, found, given_up, converged & (phase == 2)], [1, 3, 2, 3, 4], phase
            )  # fmt: skip
            it = jnp.where(to_probe | found, 0, it + 1)
            k = jnp.where(phase == 1, jnp.where(to_probe, 0, k + 1), 0)
            return lo, hi, f_lo, f_hi, g_hi, side, mask, shift, edge, at_edge, phase, it, k

        start = (o["lo"], o["hi"], f_lo, f_hi, o["G_hi"], 0, o["cand"], o["shift"], o["hi"], o["cand"], 0, 0, 0)
        _, hi, _, _, g_hi, _, mask, _, edge, at_edge, phase, _, _ = jax.lax.while_loop(cond, body, start)
        return jnp.where(phase == 3, edge, hi), jnp.where(phase == 3, at_edge, mask & (g_hi <= 0))


class _Resolve:
    """**Resolve**: the kinks at the end of forced steps."""

    def _resolve(self, c, s, o, resolve, done):
        """Resolve the kinks at the end of forced steps (:meth:`_member_handle`).
        Units past their surfaces there that were not located (``late``) crossed at the
        same instant to within the step's error: the forced step ends a little off the
        interpolant the crossing was located on, and a guard already non-positive at a
        step's start never changes sign (two aligned first-layer neurons crossing together,
        depth 4: the second stayed inactive while its p grew to 1e-3). They are resolved
        with the others.

        A lane's first iteration is such a step, of length 0, where units sit on their
        surfaces at ``t = 0`` or are given as sliding (:meth:`_start_lanes`): they are
        decided ``initial`` (:func:`gflow.kinks.resolve`), and no unit is late."""
        initial = _initial_round(s)
        late = o["late"] & (done & ~initial)[:, None] & ~s.pending
        involved = s.pending | late
        member = functools.partial(self._member_handle, c)

        def handle_all():
            # Deep networks start the decision from the sliding controls the step's last
            # guard solved at its end, the kink (kinks.resolve).
            at_end = o["control1"] if self.deep else s.control
            mode, control, pending, records, unresolved = jax.vmap(member)(
                o["y1"], s.mode, at_end, involved, s.data, initial, s.tolf
            )
            records = jax.tree.map(lambda a: jnp.where(_bcast(done, a), a, jnp.zeros_like(a)), records)
            mode = jnp.where(done[:, None], mode, s.mode)
            control = jnp.where(done[:, None], control, s.control)
            y, jump = o["y1"], jnp.zeros(c.L)
            if self.deep:
                y, jump = self._onto_surfaces(c, y, mode, control, s.data, s.tolf, done)
            pending = jnp.where(done[:, None], pending, s.pending)
            unresolved = s.unresolved | (done & unresolved)
            return (y, mode, control, pending, unresolved, jump) + self._write(
                records, o["t_next"], s.ev_t, s.ev_k, s.ev_kind, s.ev_dir, s.n_ev
            )

        kept = (o["y1"], s.mode, s.control, s.pending, s.unresolved, jnp.zeros(c.L))
        kept += (s.ev_t, s.ev_k, s.ev_kind, s.ev_dir, s.n_ev)
        y, mode, control, pending, unresolved, jump, *events = jax.lax.cond(jnp.any(resolve), handle_all, lambda: kept)
        return _Kinks(mode, control, pending, unresolved, involved, y, jump, *events)

    def _onto_surfaces(self, c, y, mode, control, data, tolf, which):
        """The members of ``which`` with their sliding units more than half a round-off
        band off their surfaces put on them (:func:`gflow.kinks.onto_surfaces`):
        units whose slide started at a disarmed guard's band edge, and at ``t = 0`` given
        sliding units of a state saved at looser tolerances. Computed only when some
        member has one (outside ``vmap``: the solve is a dense system per layer). Returns
        the new states and the loss change of each member's move (0 where none): a jump
        the energy identity does not contain, summed into ``stats["surface_jump"]``."""
        system = self.system

        def floor(y, mode, control, data, f):
            p = system.preacts(y, data, system.base_slopes(mode, control), held=True)
            member = self._member_call(c, f)
            band = 0.5 * _noise(p, member.rtol, member.atol)
            return band, jnp.any((mode == ev.SLIDING) & (jnp.abs(p) > band))

        def moved():
            onto = jax.vmap(functools.partial(kinks.onto_surfaces, system))
            new = jnp.where(off[:, None], onto(y, data, mode, control, band), y)
            loss = jax.vmap(system.loss)
            return new, jnp.where(off, loss(new, data) - loss(y, data), 0.0)

        band, off = jax.vmap(floor)(y, mode, control, data, tolf)
        off = off & which
        return jax.lax.cond(jnp.any(off), moved, lambda: (y, jnp.zeros(off.shape, y.dtype)))

    def _member_handle(self, c, y, mode, control, pending, data, initial, tolf):
        """One member's kinks (:func:`gflow.kinks.resolve`; depth 2:
        :meth:`gflow.events.System.handle`); ``initial`` at ``t = 0``, where the units given
        as sliding are decided with those on their surfaces."""
        if self.deep:
            c = self._member_call(c, tolf)
            rate_floor = _RATE_FLOOR * c.atol
            return kinks.resolve(self.system, y, data, mode, control, pending, initial, c.rtol, c.atol, rate_floor)
        return self.system.handle(y, data, mode, control, pending, initial=initial)


class _Advance:
    """**Advance**: the new lane states, saves and stops; the event records."""

    def _advance(self, c, s, o, kinks, t_e, new_pending, has_event, accept, forced_done, n_sliding, chord):
        """The new lane states: accepted steps taken, the next step's size (to the located
        crossing, or resumed after a forced one), saves inside accepted steps, and the
        status (the stops, then the failures)."""
        cfg, E = self.cfg, self.E
        running = s.status == Status.RUNNING
        mode, control, pending = kinks.mode, kinks.control, kinks.pending
        changed = (pending != kinks.involved) | (mode != s.mode)
        pending = jnp.where((s.forced & ~o["keep"])[:, None], False, pending)  # a rejected forced step
        armed = jnp.where(accept[:, None], o["armed"] & ~changed, s.armed)
        pending = jnp.where(has_event[:, None], new_pending, pending)
        more = forced_done & jnp.any(pending, axis=1)
        t = jnp.where(accept, o["t_next"], s.t)
        y = jnp.where(accept[:, None], kinks.y, s.y)
        dt = jnp.where(
            has_event, t_e - s.t,
            jnp.where(forced_done, jnp.where(more, 0.0, s.dt_resume), o["dt_new"]),
        )  # fmt: skip
        # (A forced step that found an earlier crossing keeps the size to resume with.)
        dt_resume = jnp.where(has_event & ~s.forced, jnp.where(o["keep"], o["dt_new"], s.dt), s.dt_resume)
        pid = jax.tree.map(
            lambda new, old, r: jnp.where(forced_done, r, jnp.where(has_event, old, new)), o["pid1"], s.pid, c.pid_reset
        )
        fsal = jax.tree.map(lambda new, old: jnp.where(_bcast(accept & ~s.forced, new), new, old), o["fsal1"], s.fsal)
        made_jump = jnp.where(forced_done, True, jnp.where(accept, False, s.made_jump))
        forced = has_event | more
        saved, save_i = self._save(c, s, o, accept & running)
        # Stopping.
        gnorm, loss, speed, tolf = jax.vmap(self._member_checks, in_axes=(None, 0, 0, 0, 0, None, 0))(
            c, y, mode, control, s.data, n_sliding, chord
        )
        tolf = jnp.where(accept, tolf, s.tolf)
        n_iter = s.n_iter + 1
        step_collapsed = ~o["keep"] & (o["dt_new"] <= 1e-14 * jnp.maximum(jnp.abs(s.t), 1.0))
        status = jnp.select(
            [
                kinks.unresolved,
                step_collapsed & ~o["finite"],
                ~jnp.isfinite(dt),
                (kinks.n_ev > E) & (not cfg.through),
                jnp.sum(mode == ev.SLIDING, axis=1) > cfg.max_sliding,
                accept & ~forced & (t >= c.t1),
                accept & ~forced & (gnorm < c.gtol),
                accept & ~forced & (loss < c.ltol),
                accept & ~forced & (speed < c.dtol),
                step_collapsed,
                n_iter >= c.max_steps,
            ],
            [
                Status.KINK_UNRESOLVED, Status.NONFINITE, Status.NONFINITE, Status.MAX_EVENTS, Status.SLIDING_LIMIT,
                Status.REACHED_T1, Status.CONVERGED, Status.LOSS_BELOW, Status.DIRECTION_SETTLED, Status.STEP_SIZE,
                Status.MAX_STEPS,
            ],
            Status.RUNNING,
        ).astype(jnp.int32)  # fmt: skip
        return _State(
            t=t, y=y, mode=mode, control=control, dt=dt, dt_resume=dt_resume, pid=pid, fsal=fsal,
            made_jump=made_jump, forced=forced, pending=pending, armed=armed, ev_t=kinks.ev_t, ev_k=kinks.ev_k,
            ev_kind=kinks.ev_kind, ev_dir=kinks.ev_dir, n_ev=kinks.n_ev, saved=saved, save_i=save_i,
            n_acc=s.n_acc + accept, n_rej=s.n_rej + (~o["keep"] & ~has_event), n_iter=n_iter, status=status,
            slot=s.slot, mode0=jnp.where((forced_done & _initial_round(s))[:, None], mode, s.mode0),
            unresolved=kinks.unresolved, tolf=tolf, jump=s.jump + jnp.where(accept, kinks.jump, 0.0), data=s.data,
        )  # fmt: skip

    def _member_checks(self, c, y, mode, control, data, n_sliding, chord):
        """The gradient norm, loss and direction speed the stops compare (``inf`` where the
        stop is off), and the tolerance factor (:meth:`_tolerance_factor`)."""
        cfg, system = self.cfg, self.system
        loss = system.loss(y, data) if (cfg.use_ltol or cfg.follow) else jnp.inf
        if not (cfg.use_gtol or cfg.use_dtol or cfg.follow):
            return jnp.inf, loss, jnp.inf, jnp.ones(())
        f = system.field(y, data, self.slopes_of(y, data, mode, control, n_sliding, chord))
        norm = jnp.linalg.norm(f)  # f[-1] = 0: θ only
        # How fast the direction moves per unit of log‖θ‖: ‖d(θ/‖θ‖)/d log‖θ‖‖ =
        # ‖f_⊥‖/(θ̂·f) = tan ∠(θ, f), infinite while ‖θ‖ does not grow.
        radial = jnp.dot(y, f) / jnp.maximum(jnp.linalg.norm(y[:-1]), 1e-300)
        tangential = jnp.sqrt(jnp.maximum(jnp.dot(f, f) - radial**2, 0.0))
        speed = jnp.where(radial > 0, tangential / jnp.where(radial > 0, radial, 1.0), jnp.inf)
        tolf = self._tolerance_factor(y, loss, norm, c.rtol, c.atol, c.mtol)
        off = jnp.inf
        return (norm if cfg.use_gtol else off), (loss if cfg.use_ltol else off), (speed if cfg.use_dtol else off), tolf

    def _save(self, c, s, o, accepted):
        """Save the requested times that fall inside accepted steps."""
        S, ts = c.S, c.ts
        if S == 0:
            return s.saved, s.save_i

        def due(carry):
            saved, i = carry
            return accepted & (i < S) & (ts[jnp.minimum(i, S - 1)] <= o["t_next"])

        def body(carry):
            saved, i = carry
            d = due(carry)
            tau = ts[jnp.minimum(i, S - 1)]
            y = jax.vmap(lambda t0, t_next, dense, tau: self.interpolant(c, t0, t_next, dense).evaluate(tau))(
                s.t, o["t_next"], o["dense"], tau
            )
            y = jnp.where((tau >= o["t_next"])[:, None], o["y1"], y)
            rows = jnp.arange(c.L)
            cur = saved[rows, jnp.minimum(i, S - 1)]
            saved = saved.at[rows, jnp.minimum(i, S - 1)].set(jnp.where(d[:, None], y, cur))
            return saved, i + d

        return jax.lax.while_loop(lambda carry: jnp.any(due(carry)), body, (s.saved, s.save_i))

    def _write(self, records, t_event, ev_t, ev_k, ev_kind, ev_dir, n_ev):
        """Append each record set (in flat index order) to the event buffers; ``t_event``
        is one time per lane, or one ``(L, P)`` array of times per record set."""
        E, P = self.E, self.P
        rows = jnp.arange(ev_t.shape[0])[:, None]
        times = t_event if isinstance(t_event, list) else [t_event[:, None]] * len(records)
        for (mask, kind, direction), t_event in zip(records, times):
            pos = n_ev[:, None] + jnp.cumsum(mask, axis=1, dtype=jnp.int32) - 1
            ok = mask & (pos < E)
            pos = jnp.where(ok, pos, E)  # out of range: dropped
            k = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32), mask.shape)
            ev_t = ev_t.at[rows, pos].set(jnp.broadcast_to(t_event, mask.shape), mode="drop")
            ev_k = ev_k.at[rows, pos].set(k, mode="drop")
            ev_kind = ev_kind.at[rows, pos].set(kind, mode="drop")
            ev_dir = ev_dir.at[rows, pos].set(direction, mode="drop")
            n_ev = n_ev + jnp.sum(mask, axis=1, dtype=jnp.int32)
        return ev_t, ev_k, ev_kind, ev_dir, n_ev


class _Program(_Run, _Lanes, _Step, _Locate, _Resolve, _Advance, _Integrand):
    """One compiled program: the stages of the integrator for one :class:`Config`.

    :meth:`run` is the whole call: start a lane per trajectory, iterate, collect. Each
    iteration (:meth:`_iteration`) reads top to bottom: **step** every running member
    (:meth:`_attempt`: one solver step and its event guards), **locate** the earliest
    crossing of the members whose guards changed sign (:meth:`_locate`), **resolve** the
    kinks at the end of forced steps (:meth:`_resolve`), **advance** the accepted members
    and check the **stops** (:meth:`_advance`). Each stage is a class of its own above, in
    that order (:class:`_Run`, :class:`_Lanes`, :class:`_Step`, :class:`_Locate`,
    :class:`_Resolve`, :class:`_Advance`), after the field they all integrate
    (:class:`_Integrand`)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        small = written_out_below(cfg.lanes)
        self.system = ev.System(_unravel_for(cfg.shapes), cfg.loss, cfg.n, cfg.hidden_widths, cfg.max_sliding, small)
        self.base_solver = _SOLVERS[cfg.solver]()
        self.P, self.E, self.M = self.system.P, cfg.max_events, cfg.event_samples
        self.deep = len(cfg.hidden_widths) > 1
        self.terms = diffrax.ODETerm(self.vector_field)
        self.error_order = self.base_solver.order(self.terms) + 1
        # Shallow networks: the stages written out (the loop over stages costs more than the
        # tiny field). Deeper ones keep Diffrax's stage loop: there the field dominates, and
        # writing out the stages would multiply the compile time of the sliding-control solves.
        shallow = len(cfg.shapes) == 2 and cfg.solver not in _IMPLICIT
        self.rk = _explicit_rk(self.base_solver.tableau, self.vector_field) if shallow else None
        # Traced for the lane state's shapes and called inside the loop: jitted, with every
        # input an argument, so that it is traced once (see events._traced_once).
        self.start_lanes = jax.jit(self._start_lanes)


class _Kinks(NamedTuple):
    """What resolving the kinks of an iteration changes in the lane states."""

    mode: jax.Array
    control: jax.Array
    pending: jax.Array
    unresolved: jax.Array
    involved: jax.Array  # the units resolved (changes re-arm their guards)
    y: jax.Array  # the state after them (deep: sliding units put on their surfaces)
    jump: jax.Array  # the loss change of that move (0 where none)
    ev_t: jax.Array
    ev_k: jax.Array
    ev_kind: jax.Array
    ev_dir: jax.Array
    n_ev: jax.Array


_IDLE = -1  # a lane with no trajectory left to integrate
_BACK_PROBES = 40  # most probes back from the round-off band's edge for a unit's zero (_member_locate)
# The least rtol motion_tol scales to (_Program._tolerance_factor): about 5 ulps, so that the
# step's rounding (an ulp of θ) stays below the error it is held to.
_RTOL_FLOOR = 1e-15
_RATE_FLOOR = 1e-2  # times atol: rates of units on their surfaces that count as zero at a kink
# A forced step whose error estimate is this many times the tolerance is rejected (_attempt):
# 20-point Scale problem at rtol 1e-11, atol 1e-13, t ≈ 18.33, a forced step of one sliding
# set took the loss from 2.3e-20 to 7.5e6 and every unit across its surface.
_FORCED_ERROR_MAX = 1e3


def _initial_round(s):
    """Lanes whose step is a forced step of length 0 at ``t = 0``: the kinks of units on
    their surfaces at the start and of units given as sliding
    (:meth:`_Program._start_lanes`; a second such step where more units than slots wait)."""
    return s.forced & (s.t == 0.0) & (s.dt == 0.0)


def _theta_norm(x):
    """RMS norm of a state's θ part (every entry but the last, the energy integral)."""
    return optx.rms_norm(x[..., :-1])


def _explicit_rk(tableau, field):
    """One step of the explicit Runge–Kutta method with this Butcher tableau (Diffrax's
    coefficients), its stages written out rather than looped over: under ``vmap`` on a
    CPU, Diffrax's stage loop costs more than the tiny fields it evaluates.

    ``step(t0, t1, y, args, f0)`` returns ``(y1, y_err, dense, f1)`` as Diffrax's
    ``solver.step`` does (``dense`` feeds the solver's interpolation class; ``f1`` is the
    field at ``y1``, the next step's first stage). The tableau must be first-same-as-last
    with the solution as its last stage (Dopri5, Tsit5, Dopri8)."""
    if not (tableau.fsal and tableau.ssal):
        raise ValueError("_explicit_rk: the tableau must be FSAL with the solution as its last stage")
    c = [float(v) for v in np.asarray(tableau.c)]
    a = [[float(v) for v in np.asarray(row)] for row in tableau.a_lower]
    b_err = [float(v) for v in np.asarray(tableau.b_error)]

    def combine(y, coeffs, ks):
        return functools.reduce(jnp.add, [w * k for w, k in zip(coeffs, ks) if w != 0.0], y)

    def step(t0, t1, y, args, f0):
        h = t1 - t0
        ks, f = [h * f0], f0
        for ci, row in zip(c, a):
            y_stage = combine(y, row, ks)
            f = field(t0 + ci * h, y_stage, args)
            ks.append(h * f)
        y1 = y_stage  # the last stage is the solution (FSAL, SSAL)
        y_err = combine(jnp.zeros_like(y), b_err, ks)
        return y1, y_err, dict(y0=y, y1=y1, k=jnp.stack(ks)), f

    return step


_HELD_BAND = 4.0  # a sliding unit this many round-off bands off its surface is no longer held


def _held_guards(g, p, mode, noise):
    """Deep networks: a sliding unit's guard also fires once its pre-activation is
    ``_HELD_BAND`` round-off bands (:func:`_noise`) off its surface, ``g = min(c, 1 − c,
    1 − |p|/(_HELD_BAND·noise))``. On its surface the controls zero its rate and it stays
    at round-off (2e-11 at rtol 1e-10, ``tests/test_deep.py``); when the sliding set admits
    no controls in ``[0, 1]`` that zero every rate, the damped solve returns controls
    inside ``[0, 1]`` with the rates left over and the unit drifts off its surface with
    its guard ``min(c, 1 − c)`` positive (the 20-point Scale problem of
    ``benchmarks/deep_scale``: 11 units at t = 12, up to 3.2e-5 of rate left over). Then
    the event ends its slide (:func:`gflow.kinks.decide`: to the side its
    one-sided rates point to), so no unit is held farther than the band allows. A unit
    that starts sliding a band off its surface (the unarmed guards fire at ``±noise``) is
    put on it (:meth:`_onto_surfaces`)."""
    held = 1.0 - jnp.abs(p) / (_HELD_BAND * noise)
    return jnp.where(mode == ev.SLIDING, jnp.minimum(g, held), g)


def _bcast(mask, a):
    return jnp.reshape(mask, mask.shape + (1,) * (a.ndim - mask.ndim))
