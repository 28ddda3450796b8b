// Hairer's DOP853: an explicit Runge-Kutta method of order 8 with embedded error estimators of orders
// 5 and 3 and a 7th-order dense output, for one trajectory, exactly as scipy's
// solve_ivp(method="DOP853") runs it (scipy/integrate/_ivp/rk.py and common.py):
//
//   * the same Butcher tableau (12 stages + the FSAL evaluation f(t + h, y_new) + 3 stages for the
//     dense output);
//   * error norm  |h| e5^2 / sqrt(len * (e5^2 + 0.01 e3^2)),  e5, e3 the RMS-free sums of the 5th-
//     and 3rd-order estimators scaled by  atol + rtol * max(|y|, |y_new|);
//   * step control: accept when the norm is < 1, next step times
//     min(10, 0.9 norm^(-1/8)) (at most 1 right after a rejection; 10 for a zero norm), after a
//     rejection times max(0.2, 0.9 norm^(-1/8)); steps clipped to max_step and to the end point;
//     failure when the step falls below 10 ulp(t);
//   * the initial step of scipy's select_initial_step (order 7), unless first_step is given;
//   * dense output F[0..6] evaluated by the same nested product;
//   * events: sign changes of g between step ends (scipy's find_active_events, with directions),
//     located by Brent's method on the dense output to 4 eps, terminal after a given count;
//   * t_eval points inside each step evaluated on its dense output; right-hand side evaluations
//     counted as scipy's nfev counts them (the dense output's 3 stages only when a step needs it);
//   * on request (Outputs::dense_steps), every accepted step's interpolant kept, as
//     scipy's dense_output=True keeps them (its 3 stages then computed at every step).
//
// The state is integrated in T (float or double); the coefficients are scipy's doubles rounded to T.
// Nothing here allocates or knows about XLA: the caller gives a workspace of WorkspaceSize(n)
// elements and functors for the right-hand side and the events, so the CPU handler and the CUDA
// kernel (one trajectory per thread) run the same code. The CPU handler's built-in models also
// run L trajectories as SIMD lanes: L integrators interleave their workspaces element by element
// (kStride = L), so that the stage sums, the error norms and the right-hand sides of all L are
// vector operations (StageLanes, ErrorNormLanes), each lane rounding as one trajectory alone.
#ifndef JAXEXT_KERNELS_DOP853_H_
#define JAXEXT_KERNELS_DOP853_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "jaxext/kernels/platform.h"

#if defined(__CUDACC__)
#define JAXEXT_DOP853_CONST static constexpr __device__
// The integrator's member functions are __host__ __device__; in a .cu file only their device
// instantiations run, so the host ones reading these __device__ tables are never called.
#pragma nv_diag_suppress 20091
#else
#define JAXEXT_DOP853_CONST static constexpr
#endif
// On the GPU the loops over components unroll when the state size is static, so that arrays
// indexed by them can live in registers; on the CPU the compiler decides.
#if defined(__CUDA_ARCH__)
#define JAXEXT_DOP853_UNROLL _Pragma("unroll")
#else
#define JAXEXT_DOP853_UNROLL
#endif

namespace jaxext {
namespace dop853 {

constexpr int kStages = 12;    // stages of one step: K[0] = f(t, y) .. K[11]
constexpr int kExtended = 16;  // + K[12] = f(t + h, y_new), + K[13..15] for the dense output
constexpr int kDense = 7;      // interpolant coefficients F[0..6]

// Nodes c_s of the 16 stages (12 of the step, the FSAL evaluation at c = 1, 3 for dense output).
JAXEXT_DOP853_CONST double kC[kExtended] = {
    0.0, 0.05260015195876773, 0.0789002279381516, 0.1183503419072274, 0.2816496580927726,
    0.3333333333333333, 0.25, 0.3076923076923077, 0.6512820512820513, 0.6, 0.8571428571428571, 1.0,
    1.0, 0.1, 0.2, 0.7777777777777778
};
// Stage coefficients a_sj (j < s), rows 0-15; row 12 is the weights of the 8th-order solution
// (scipy's B), the FSAL stage at c = 1 evaluating f there.
JAXEXT_DOP853_CONST double kA[kExtended][kExtended] = {
    {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
    {0.05260015195876773, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
     0.0},
    {0.0197250569845379, 0.0591751709536137, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
     0.0, 0.0, 0.0},
    {0.02958758547680685, 0.0, 0.08876275643042054, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
     0.0, 0.0, 0.0, 0.0},
    {0.2413651341592667, 0.0, -0.8845494793282861, 0.924834003261792, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
     0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
    {0.037037037037037035, 0.0, 0.0, 0.17082860872947386, 0.12546768756682242, 0.0, 0.0, 0.0, 0.0,
     0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
    {0.037109375, 0.0, 0.0, 0.17025221101954405, 0.06021653898045596, -0.017578125, 0.0, 0.0, 0.0,
     0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
    {0.03709200011850479, 0.0, 0.0, 0.17038392571223998, 0.10726203044637328,
     -0.015319437748624402, 0.008273789163814023, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
    {0.6241109587160757, 0.0, 0.0, -3.3608926294469414, -0.868219346841726, 27.59209969944671,
     20.154067550477894, -43.48988418106996, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
    {0.47766253643826434, 0.0, 0.0, -2.4881146199716677, -0.590290826836843, 21.230051448181193,
     15.279233632882423, -33.28821096898486, -0.020331201708508627, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
     0.0},
    {-0.9371424300859873, 0.0, 0.0, 5.186372428844064, 1.0914373489967295, -8.149787010746927,
     -18.52006565999696, 22.739487099350505, 2.4936055526796523, -3.0467644718982196, 0.0, 0.0,
     0.0, 0.0, 0.0, 0.0},
    {2.273310147516538, 0.0, 0.0, -10.53449546673725, -2.0008720582248625, -17.9589318631188,
     27.94888452941996, -2.8589982771350235, -8.87285693353063, 12.360567175794303,
     0.6433927460157636, 0.0, 0.0, 0.0, 0.0, 0.0},
    {0.054293734116568765, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003,
     -5.801203960010585, 0.3111643669578199, -0.1521609496625161, 0.20136540080403034,
     0.04471061572777259, 0.0, 0.0, 0.0, 0.0},
    {0.056167502283047954, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25350021021662483, -0.2462390374708025,
     -0.12419142326381637, 0.15329179827876568, 0.00820105229563469, 0.007567897660545699,
     -0.008298, 0.0, 0.0, 0.0},
    {0.03183464816350214, 0.0, 0.0, 0.0, 0.0, 0.028300909672366776, 0.053541988307438566,
     -0.05492374857139099, 0.0, 0.0, -0.00010834732869724932, 0.0003825710908356584,
     -0.00034046500868740456, 0.1413124436746325, 0.0, 0.0},
    {-0.42889630158379194, 0.0, 0.0, 0.0, 0.0, -4.697621415361164, 7.683421196062599,
     4.06898981839711, 0.3567271874552811, 0.0, 0.0, 0.0, -0.0013990241651590145,
     2.9475147891527724, -9.15095847217987, 0.0},
};
// Error estimators: the 5th- and 3rd-order differences, over K[0..12].
JAXEXT_DOP853_CONST double kE5[kStages + 1] = {
    0.01312004499419488, 0.0, 0.0, 0.0, 0.0, -1.2251564463762044, -0.4957589496572502,
    1.6643771824549864, -0.35032884874997366, 0.3341791187130175, 0.08192320648511571,
    -0.022355307863886294, 0.0
};
JAXEXT_DOP853_CONST double kE3[kStages + 1] = {
    -0.18980075407240762, 0.0, 0.0, 0.0, 0.0, 4.450312892752409, 1.8915178993145003,
    -5.801203960010585, -0.4226823213237919, -0.1521609496625161, 0.20136540080403034,
    0.02265179219836082, 0.0
};
// Dense output: coefficients of F[3..6] over K[0..15].
JAXEXT_DOP853_CONST double kD[4][kExtended] = {
    {-8.428938276109013, 0.0, 0.0, 0.0, 0.0, 0.5667149535193777, -3.0689499459498917,
     2.38466765651207, 2.117034582445028, -0.871391583777973, 2.2404374302607883,
     0.6315787787694688, -0.08899033645133331, 18.148505520854727, -9.194632392478356,
     -4.436036387594894},
    {10.427508642579134, 0.0, 0.0, 0.0, 0.0, 242.28349177525817, 165.20045171727028,
     -374.5467547226902, -22.113666853125306, 7.733432668472264, -30.674084731089398,
     -9.332130526430229, 15.697238121770845, -31.139403219565178, -9.35292435884448,
     35.81684148639408},
    {19.985053242002433, 0.0, 0.0, 0.0, 0.0, -387.0373087493518, -189.17813819516758,
     527.8081592054236, -11.57390253995963, 6.8812326946963, -1.0006050966910838,
     0.7777137798053443, -2.778205752353508, -60.19669523126412, 84.32040550667716,
     11.99229113618279},
    {-25.69393346270375, 0.0, 0.0, 0.0, 0.0, -154.18974869023643, -231.5293791760455,
     357.6391179106141, 93.40532418362432, -37.45832313645163, 104.0996495089623, 29.8402934266605,
     -43.53345659001114, 96.32455395918828, -39.17726167561544, -149.72683625798564},
};

// Outcome per trajectory (scipy's sign convention: >= 0 is success).
enum Status : int32_t {
  kSuccess = 0,          // reached t1
  kTerminated = 1,       // stopped at a terminal event
  kMaxSteps = -1,        // max_steps step attempts without reaching t1
  kStepTooSmall = -2,    // the step size fell below 10 ulp(t)
  kNonFinite = -3,       // non-finite initial state, parameters or right-hand side
  kCallbackFailed = -4,  // a user function reported an error (the handler raises)
};

// At most this many event functions (their bookkeeping lives in fixed-size local arrays).
constexpr int kMaxEvents = 16;

template <typename T>
struct Settings {
  const T* rtol;       // per component of the state (n_control of them)
  const T* atol;
  T first_step;        // > 0: the first step size; otherwise selected as scipy does
  T max_step;          // +inf for no limit
  int64_t max_steps;   // step attempts (accepted and rejected)
};

// Where one trajectory's results go. Rows never reached (after a failure or a terminal event, or
// t_eval points outside [t0, t1]) are NaN.
template <typename T>
struct Outputs {
  const T* t_eval;         // n_eval times, ordered in the direction of integration
  int64_t n_eval;
  T* ys;                   // n_eval x n
  int64_t event_slots;     // K: occurrences stored per event
  T* t_events;             // E x K
  T* y_events;             // E x K x n
  int32_t* event_counts;   // E: occurrences recorded (as len(sol.t_events[e]) in scipy)
  T* t_final;              // 1: where integration stopped
  T* y_final;              // n: the state there
  int32_t* stats;          // 4: status, step attempts, accepted steps, right-hand side evaluations
  // The dense output of every accepted step, up to dense_steps of them (0: none; a kernel
  // that constructs Outputs with the default keeps none, and the compiler drops that code):
  // step k spans dense_t[k] .. dense_t[k + 1] (its start and its end, the end where it reached,
  // not where a terminal event cut it), and dense_f[k] holds its rows F[0..kDense-1] and then
  // y_old ((kDense + 1) x n): scipy's Dop853DenseOutput(t_old, t, y_old, F). Element e of either
  // lies at e * dense_stride: 1 on the CPU; on a GPU the trajectories' values interleave (stride
  // = their count), so that a warp's threads write neighbouring addresses.
  int64_t dense_steps = 0;
  T* dense_t = nullptr;    // dense_steps + 1
  T* dense_f = nullptr;    // dense_steps x (kDense + 1) x n
  int64_t dense_stride = 1;
};

// Elements of T the integrator needs per trajectory.
JAXEXT_HD constexpr int64_t WorkspaceSize(int64_t n) {
  return (kExtended + kDense + 5) * n + 2 * kMaxEvents;
}

template <typename T>
JAXEXT_HD T Nan() { return std::numeric_limits<T>::quiet_NaN(); }

template <typename T>
JAXEXT_HD bool Finite(T x) { return x - x == T(0); }  // false for NaN and +-inf

// nextafter in T (the unqualified C function would compute in double for float).
JAXEXT_HD float NextAfter(float x, float y) { return nextafterf(x, y); }
JAXEXT_HD double NextAfter(double x, double y) { return nextafter(x, y); }

// The variational equations' right-hand side: ds = df/dy s + [0 | df/dp], for the sensitivities
// s = d y / d (y0, p) stored n x (n + np) row-major after the state (so that integrating
// (y, s) from (y0, [I | 0]) gives them), df/dy (n x n) and df/dp (n x np) row-major.
template <typename T>
JAXEXT_HD_FUNC void Sensitivities(int64_t n, int64_t np, const T* dfdy, const T* dfdp,
                                  const T* s, T* ds) {
  const int64_t cols = n + np;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      T acc = c >= n ? dfdp[i * np + (c - n)] : T(0);
      for (int64_t k = 0; k < n; ++k) acc += dfdy[i * n + k] * s[k * cols + c];
      ds[i * cols + c] = acc;
    }
  }
}

// Integrates one trajectory. Rhs: `bool rhs(T t, const T* y, T* dydt)` (false: it failed).
// Events: `int size()`, `int direction(int e)` (-1, 0, 1), `int64_t max_count(int e)` (terminal
// after that many occurrences; 0: never), `bool value(int e, T t, const T* y, T* g)`.
// The error is controlled on the first n_control components of the state (n_control <= n).
// kStaticN > 0: the state size is known at compile time (n = kStaticN), so that the loops over
// components unroll (the CPU handler's built-in models).
// kStride > 1: the workspace's elements lie kStride apart, kStride integrators' workspaces
// interleaved (the l-th at work + l), which StageLanes (kStaticN > 0) or StageLaneRows (a state
// size known at run time, at most kMaxLaneRowsState) and ErrorNormLanes advance as SIMD lanes;
// rhs and events still see contiguous states (copied through a row).
// kStaticNControl: n_control known at compile time (kStaticN by default; 0: not known).
constexpr int kMaxLaneRowsState = 64;
template <typename T, typename Rhs, typename Events, int kStaticN = 0, int kStride = 1,
          int kStaticNControl = kStaticN>
class Integrator {
  static_assert(kStride == 1 || (kStaticN > 0) == (kStaticNControl > 0),
                "interleaved workspaces: both sizes static, or both known at run time");
  // The contiguous row of one lane's state (kStride > 1).
  static constexpr int kRowSize = kStride == 1 ? 1 : (kStaticN > 0 ? kStaticN : kMaxLaneRowsState);

 public:
  JAXEXT_HD_FUNC Integrator(Rhs& rhs, Events& events, int n, int n_control,
                            const Settings<T>& settings, T* work)
      : Integrator(rhs, events, n, n_control, settings, work, work + At(kExtended * n)) {}

  // The stages K[0..15] (kExtended * n elements) in `stages`, the rest of the workspace
  // (WorkspaceSize(n) - kExtended * n elements) in `work`.
  JAXEXT_HD_FUNC Integrator(Rhs& rhs, Events& events, int n, int n_control,
                            const Settings<T>& settings, T* stages, T* work)
      : rhs_(rhs), events_(events), n_(n), nc_(n_control), s_(settings) {
    k_ = stages;
    f_ = work;
    y_ = f_ + At(kDense * n);
    y_new_ = y_ + At(n);
    y_old_ = y_new_ + At(n);
    tmp_ = y_old_ + At(n);
    scratch_ = tmp_ + At(n);
    g_old_ = scratch_ + At(n);
    g_new_ = g_old_ + At(kMaxEvents);
  }

  // Returned by the phases below while the trajectory goes on (not a Status).
  static constexpr int32_t kRunning = 100;

  // Integrates one trajectory: Begin, then Attempt, the stages and Conclude until the status is
  // final. `inputs_finite`: false when the caller found the trajectory's parameters non-finite.
  JAXEXT_HD_FUNC int32_t Run(T t0, T t1, const T* y0, bool inputs_finite, const Outputs<T>& out) {
    int32_t status = Begin(t0, t1, y0, inputs_finite, out);
    while (status == kRunning) {
      status = Attempt(out);
      if (status != kRunning) break;
      if (!Stages<1>()) return Fail(out);
      status = Conclude(out);
    }
    return status;
  }

  // The phases of Run, for a caller that advances several integrators stage by stage (the CPU
  // handler interleaves trajectories so that one's latency hides another's). Begin, Attempt and
  // Conclude return kRunning or the final status (its outputs then written); Stage returns false
  // when the right-hand side failed, and the caller finishes the trajectory with Fail.

  // Everything before the first step: f(t0, y0), the events' first values, the initial step.
  JAXEXT_HD_FUNC int32_t Begin(T t0, T t1, const T* y0, bool inputs_finite,
                               const Outputs<T>& out) {
    const int n = N();
    const int n_events = events_.size();
    for (int64_t i = 0; i < out.n_eval * n; ++i) out.ys[i] = Nan<T>();
    for (int64_t i = 0; i < n_events * out.event_slots; ++i) out.t_events[i] = Nan<T>();
    for (int64_t i = 0; i < n_events * out.event_slots * n; ++i) out.y_events[i] = Nan<T>();
    for (int e = 0; e < n_events; ++e) out.event_counts[e] = 0;
    if (out.dense_steps > 0) {
      const int64_t s = out.dense_stride;
      for (int64_t i = 0; i <= out.dense_steps; ++i) out.dense_t[i * s] = Nan<T>();
      for (int64_t i = 0; i < out.dense_steps * (kDense + 1) * n; ++i) {
        out.dense_f[i * s] = Nan<T>();
      }
    }
    steps_ = accepted_ = nfev_ = 0;
    t_ = t0;
    t1_ = t1;
    dense_ready_ = false;

    bool finite = inputs_finite && Finite(t0) && Finite(t1);
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < n; ++i) {
      y_[At(i)] = y0[i];
      finite = finite && Finite(y0[i]);
    }
    if (!finite) return Finish(kNonFinite, out);
    const T dir = t1 >= t0 ? T(1) : T(-1);
    dir_ = dir;
    if (!Eval(t0, y_, k_)) return Finish(kCallbackFailed, out);
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < NC(); ++i) {  // the state's own derivative (not sensitivities)
      if (!Finite(k_[At(i)])) return Finish(kNonFinite, out);
    }
    ie_ = 0;  // next t_eval point
    while (ie_ < out.n_eval && dir * (out.t_eval[ie_] - t0) < 0) ++ie_;
    for (int e = 0; e < n_events; ++e) {
      if (!events_.value(e, t0, Row(y_), &g_old_[At(e)])) return Finish(kCallbackFailed, out);
    }
    if (t0 == t1 || n == 0) {  // scipy: finished without a step
      for (; ie_ < out.n_eval && out.t_eval[ie_] == t0; ++ie_) {
        JAXEXT_DOP853_UNROLL
        for (int i = 0; i < n; ++i) out.ys[ie_ * n + i] = y_[At(i)];
      }
      return Finish(kSuccess, out);
    }
    if (s_.first_step > 0) {
      h_abs_ = s_.first_step;
    } else if (!InitialStep(t0, t1, &h_abs_)) {
      return Finish(kCallbackFailed, out);
    }
    fresh_ = true;
    return kRunning;
  }

  // The size of the next step attempt (scipy's RungeKutta._step_impl up to the stages), from the
  // last accepted step's proposal or, after a rejection, the reduced one.
  JAXEXT_HD_FUNC int32_t Attempt(const Outputs<T>& out) {
    if (fresh_) {  // the first attempt of a step
      min_step_ = T(10) * fabs(NextAfter(t_, dir_ * std::numeric_limits<T>::infinity()) - t_);
      ha_ = h_abs_ > s_.max_step ? s_.max_step : (h_abs_ < min_step_ ? min_step_ : h_abs_);
      rejected_ = nonfinite_trial_ = fresh_ = false;
    }
    if (ha_ < min_step_) return Finish(nonfinite_trial_ ? kNonFinite : kStepTooSmall, out);
    if (steps_ >= s_.max_steps) return Finish(kMaxSteps, out);
    T h = ha_ * dir_;
    t_new_ = t_ + h;
    if (dir_ * (t_new_ - t1_) > 0) t_new_ = t1_;
    h = t_new_ - t_;
    ha_ = fabs(h);
    if (h == T(0)) return Finish(nonfinite_trial_ ? kNonFinite : kStepTooSmall, out);
    ++steps_;
    h_try_ = h;
    return kRunning;
  }

  // Stage S of the attempt (1 <= S <= kStages): K[S] for S < kStages; at kStages y_new (row 12 of
  // kA holds the solution's weights, and kC[12] = 1) and f(t + h, y_new) into K[12]. K[0] holds
  // f(t, y). False: the right-hand side failed (then Fail). Interleaved integrators (kStride > 1)
  // advance through StageLanes instead.
  template <int S>
  JAXEXT_HD bool Stage() {
    static_assert(kStride == 1, "interleaved integrators advance through StageLanes");
    T* state = S < kStages ? tmp_ : y_new_;
    StageState<S>(y_, h_try_, state);
    return Eval(t_ + T(kC[S]) * h_try_, state, k_ + At(S * N()));
  }

  // Stages S..kStages in order.
  template <int S = 1>
  JAXEXT_HD bool Stages() {
    if (!Stage<S>()) return false;
    if constexpr (S < kStages) {
      return Stages<S + 1>();
    } else {
      return true;
    }
  }

  // After the stages: the error norm; a rejected attempt shrinks the step (Attempt retries), an
  // accepted one moves on (events, t_eval points, FSAL).
  JAXEXT_HD_FUNC int32_t Conclude(const Outputs<T>& out) {
    return Conclude(out, ErrorNorm(h_try_));
  }

  // Conclude with the attempt's error norm already computed (ErrorNormLanes).
  JAXEXT_HD_FUNC int32_t Conclude(const Outputs<T>& out, const T err) {
    const T max_factor = T(10), min_factor = T(0.2), safety = T(0.9);
    const T exponent = T(-1) / T(8);
    if (!(err < T(1))) {
      if (!Finite(err)) nonfinite_trial_ = true;
      const T f = safety * pow(err, exponent);
      ha_ *= f > min_factor ? f : min_factor;  // a NaN norm shrinks by min_factor, as in scipy
      rejected_ = true;
      return kRunning;
    }
    T factor = max_factor;
    if (err != T(0)) {
      const T f = safety * pow(err, exponent);
      factor = f < max_factor ? f : max_factor;
    }
    if (rejected_ && factor > T(1)) factor = T(1);
    ha_ *= factor;

    const int n = N();
    ++accepted_;
    t_old_ = t_;
    t_ = t_new_;
    h_ = h_try_;
    h_abs_ = ha_;
    fresh_ = true;
    if constexpr (kStride == 1) {
      T* swap = y_old_;  // y_old <- y <- y_new
      y_old_ = y_;
      y_ = y_new_;
      y_new_ = swap;
    } else {  // each lane's buffers stay where the other lanes' are
      JAXEXT_DOP853_UNROLL
      for (int i = 0; i < n; ++i) {
        y_old_[At(i)] = y_[At(i)];
        y_[At(i)] = y_new_[At(i)];
      }
    }
    dense_ready_ = false;
    const bool finished = dir_ * (t_ - t1_) >= 0;
    if (out.dense_steps > 0) {  // (the step's end, before a terminal event moves t_ to its root)
      if (!Dense()) return Finish(kCallbackFailed, out);
      if (accepted_ <= out.dense_steps) {
        const int64_t k = accepted_ - 1;
        const int64_t s = out.dense_stride;
        out.dense_t[k * s] = t_old_;
        out.dense_t[(k + 1) * s] = t_;
        T* rows = out.dense_f + k * (kDense + 1) * n * s;
        for (int64_t i = 0; i < kDense * n; ++i) rows[i * s] = f_[At(i)];
        for (int i = 0; i < n; ++i) rows[(kDense * n + i) * s] = y_old_[At(i)];
      }
    }

    bool terminate = false;
    if (events_.size() > 0) {
      int32_t status = HandleEvents(out, &terminate);
      if (status != kSuccess) return Finish(status, out);
    }
    for (; ie_ < out.n_eval && dir_ * (out.t_eval[ie_] - t_) <= 0; ++ie_) {
      if (!Dense()) return Finish(kCallbackFailed, out);
      DenseAt(out.t_eval[ie_], out.ys + ie_ * n, 1);
    }
    if (terminate) return Finish(kTerminated, out);
    if (finished) return Finish(kSuccess, out);
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < n; ++i) k_[At(i)] = k_[At(kStages * n + i)];  // FSAL: f(t_new, y_new)
    return kRunning;
  }

  // A right-hand side failed during the stages.
  JAXEXT_HD_FUNC int32_t Fail(const Outputs<T>& out) { return Finish(kCallbackFailed, out); }

  // The size of the attempt under way (after Attempt returned kRunning).
  JAXEXT_HD T StepSize() const { return h_try_; }

  // SIMD lanes: `lanes` points to kStride integrators whose workspaces interleave (kStride > 1:
  // lane l's at lanes[0]'s + l) and whose settings (tolerances) are the same; h[l]: lane l's
  // step size (0 for a lane without a trajectory: its values are then never read).
  // V: kStride values of T (jaxext/kernels/lanes.h's Lanes), lane by lane as T rounds.

  // Stage S of every lane (1 <= S <= kStages), as Stage<S> does for one: the stage states are
  // formed as vectors and `rhs(const V* y, V* dydt)` evaluates the kStaticN components of all
  // lanes at once (it cannot fail: the built-in models).
  template <int S, typename V, typename VectorRhs>
  static JAXEXT_HD void StageLanes(Integrator* lanes, const V& h, VectorRhs&& rhs) {
    static_assert(kStride > 1 && kStaticN > 0, "StageLanes is for interleaved integrators "
                  "of a static state size");
    constexpr int n = kStaticN;
    const Integrator& first = lanes[0];  // lane l's element i: first's pointer + At(i) + l
    V y[n], f[n];
    for (int i = 0; i < n; ++i) {
      y[i] = first.template LaneStageState<S>(h, n, i);
      if constexpr (S == kStages) y[i].Store(first.y_new_ + At(i));
    }
    rhs(y, f);
    for (int i = 0; i < n; ++i) f[i].Store(first.k_ + At(S * n + i));
    for (int l = 0; l < kStride; ++l) ++lanes[l].nfev_;
  }

  // Stage S of every lane for a state size known at run time (kStaticN = 0), as Stage<S> does for
  // one: the stage states are formed as vectors into the workspace, where they lie as lane-major
  // rows (element i of the kStride lanes side by side, at rows[i * kStride + l]), and
  // `rhs(const T* t, const T* y, T* dydt)` evaluates all lanes at once from such rows (t: each
  // lane's stage time) into K[S]'s rows. Returns what rhs returns (false: it failed; the caller
  // finds which lane).
  template <int S, typename V, typename RowsRhs>
  static JAXEXT_HD bool StageLaneRows(Integrator* lanes, const V& h, RowsRhs&& rhs) {
    static_assert(kStride > 1 && kStaticN == 0, "StageLaneRows is for interleaved integrators "
                  "of a state size known at run time");
    const Integrator& first = lanes[0];
    const int n = first.N();
    T* state = S < kStages ? first.tmp_ : first.y_new_;
    for (int i = 0; i < n; ++i) first.template LaneStageState<S>(h, n, i).Store(state + At(i));
    T t[kStride];
    for (int l = 0; l < kStride; ++l) {
      t[l] = lanes[l].t_ + T(kC[S]) * h[l];
      ++lanes[l].nfev_;
    }
    return rhs(static_cast<const T*>(t), static_cast<const T*>(state), first.k_ + At(S * n));
  }

  // The error norms of every lane's attempt (after StageLanes<kStages>), as ErrorNorm computes
  // each: err[l] for lane l, for Conclude(out, err[l]).
  template <typename V>
  static JAXEXT_HD void ErrorNormLanes(const Integrator* lanes, const V& h, T* err) {
    static_assert(kStride > 1, "ErrorNormLanes is for interleaved integrators");
    const Integrator& first = lanes[0];
    const int n = first.N(), n_control = first.NC();
    V e5 = T(0), e3 = T(0);
    for (int i = 0; i < n_control; ++i) {
      const V a = fabs(V::Load(first.y_ + At(i))), b = fabs(V::Load(first.y_new_ + At(i)));
      const V scale = V(first.s_.atol[i]) + V::Max(a, b) * V(first.s_.rtol[i]);
      V s5 = T(0), s3 = T(0);
      JAXEXT_UNROLL_ALL
      for (int j = 0; j <= kStages; ++j) {
        const V k = V::Load(first.k_ + At(j * n + i));
        if (kE5[j] != 0) s5 += V(T(kE5[j])) * k;
        if (kE3[j] != 0) s3 += V(T(kE3[j])) * k;
      }
      s5 = s5 / scale;
      s3 = s3 / scale;
      e5 += s5 * s5;
      e3 += s3 * s3;
    }
    for (int l = 0; l < kStride; ++l) err[l] = NormOf(h[l], e5[l], e3[l], n_control);
  }

 private:
  // Element i of stage S's state for all kStride lanes (called on lane 0, whose pointers are the
  // lanes' first; h: each lane's step size), as StageState computes each lane's.
  template <int S, typename V>
  JAXEXT_HD V LaneStageState(const V& h, int n, int i) const {
    V acc = T(0);
    JAXEXT_UNROLL_ALL
    for (int j = 0; j < S; ++j) {
      if (kA[S][j] != 0) acc += V(T(kA[S][j])) * V::Load(k_ + At(j * n + i));
    }
    return V::Load(y_ + At(i)) + acc * h;
  }

  // Where element i of a workspace array lies.
  JAXEXT_HD static constexpr int64_t At(int64_t i) { return i * kStride; }

  // A workspace array's first N() elements as a contiguous row (for rhs_ and events_).
  JAXEXT_HD const T* Row(const T* x) {
    if constexpr (kStride == 1) {
      return x;
    } else {
      const int n = N();
      for (int i = 0; i < n; ++i) row_[i] = x[At(i)];
      return row_;
    }
  }

  JAXEXT_HD int N() const { return kStaticN > 0 ? kStaticN : n_; }
  JAXEXT_HD int NC() const { return kStaticNControl > 0 ? kStaticNControl : nc_; }

  JAXEXT_HD bool Eval(T t, const T* y, T* f) {
    ++nfev_;
    if constexpr (kStride == 1) {
      return rhs_(t, y, f);
    } else {
      if (!rhs_(t, Row(y), f_row_)) return false;
      const int n = N();
      for (int i = 0; i < n; ++i) f[At(i)] = f_row_[i];
      return true;
    }
  }

  JAXEXT_HD T Rms(T sum_squares) const { return sqrt(sum_squares / T(NC())); }

  // scipy's select_initial_step for an error estimator of order 7 (K[0] holds f(t0, y0)).
  JAXEXT_HD_FUNC bool InitialStep(T t0, T t1, T* h_abs) {
    const int n = N();
    const T interval = fabs(t1 - t0);
    T s0 = 0, s1 = 0;
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < NC(); ++i) {
      const T y = y_[At(i)], f = k_[At(i)];
      const T scale = s_.atol[i] + fabs(y) * s_.rtol[i];
      s0 += (y / scale) * (y / scale);
      s1 += (f / scale) * (f / scale);
    }
    const T d0 = Rms(s0), d1 = Rms(s1);
    T h0 = (d0 < T(1e-5) || d1 < T(1e-5)) ? T(1e-6) : T(0.01) * d0 / d1;
    if (h0 > interval) h0 = interval;
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < n; ++i) tmp_[At(i)] = y_[At(i)] + h0 * dir_ * k_[At(i)];
    T* f1 = k_ + At(n);  // stage 1 is free until the first step
    if (!Eval(t0 + h0 * dir_, tmp_, f1)) return false;
    T s2 = 0;
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < NC(); ++i) {
      const T scale = s_.atol[i] + fabs(y_[At(i)]) * s_.rtol[i];
      const T q = (f1[At(i)] - k_[At(i)]) / scale;
      s2 += q * q;
    }
    const T d2 = Rms(s2) / h0;
    T h1;
    if (d1 <= T(1e-15) && d2 <= T(1e-15)) {
      h1 = h0 * T(1e-3) > T(1e-6) ? h0 * T(1e-3) : T(1e-6);
    } else {
      h1 = pow(T(0.01) / (d1 > d2 ? d1 : d2), T(1) / T(8));
    }
    T h = T(100) * h0;
    if (h1 < h) h = h1;
    if (interval < h) h = interval;
    if (s_.max_step < h) h = s_.max_step;
    *h_abs = h;
    return true;
  }

  // scipy's DOP853._estimate_error_norm.
  JAXEXT_HD_FUNC T ErrorNorm(T h) const {
    const int n = N();
    T e5 = 0, e3 = 0;
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < NC(); ++i) {
      const T a = fabs(y_[At(i)]), b = fabs(y_new_[At(i)]);
      const T scale = s_.atol[i] + (a > b ? a : b) * s_.rtol[i];
      T s5 = 0, s3 = 0;
      JAXEXT_UNROLL_ALL
      for (int j = 0; j <= kStages; ++j) {
        if (kE5[j] != 0) s5 += T(kE5[j]) * k_[At(j * n + i)];
        if (kE3[j] != 0) s3 += T(kE3[j]) * k_[At(j * n + i)];
      }
      s5 /= scale;
      s3 /= scale;
      e5 += s5 * s5;
      e3 += s3 * s3;
    }
    return NormOf(h, e5, e3, NC());
  }

  // The norm from the sums of squares e5 and e3 over n_control components.
  JAXEXT_HD static T NormOf(T h, T e5, T e3, int n_control) {
    if (e5 == T(0) && e3 == T(0)) return T(0);
    const T denom = e5 + T(0.01) * e3;
    return fabs(h) * e5 / sqrt(denom * T(n_control));
  }

  // state = base + h sum_{j < S} a[S][j] K[j]: where stage S evaluates the right-hand side.
  template <int S>
  JAXEXT_HD void StageState(const T* base, T h, T* state) const {
    const int n = N();
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < n; ++i) {
      T acc = 0;
      JAXEXT_UNROLL_ALL
      for (int j = 0; j < S; ++j) {
        if (kA[S][j] != 0) acc += T(kA[S][j]) * k_[At(j * n + i)];
      }
      state[At(i)] = base[At(i)] + acc * h;
    }
  }

  // The dense output's extra stages S..kExtended-1 of the last accepted step, into K[S..].
  template <int S>
  JAXEXT_HD bool DenseStages() {
    StageState<S>(y_old_, h_, tmp_);
    if (!Eval(t_old_ + T(kC[S]) * h_, tmp_, k_ + At(S * N()))) return false;
    if constexpr (S + 1 < kExtended) {
      return DenseStages<S + 1>();
    } else {
      return true;
    }
  }

  // The dense output of the last accepted step (3 more stages), once per step.
  JAXEXT_HD_FUNC bool Dense() {
    if (dense_ready_) return true;
    const int n = N();
    const T h = h_;
    if (!DenseStages<kStages + 1>()) return false;
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < n; ++i) {
      const T f_old = k_[At(i)], f_new = k_[At(kStages * n + i)];
      const T dy = y_[At(i)] - y_old_[At(i)];
      f_[At(i)] = dy;
      f_[At(n + i)] = h * f_old - dy;
      f_[At(2 * n + i)] = T(2) * dy - h * (f_new + f_old);
      JAXEXT_UNROLL_ALL
      for (int r = 0; r < 4; ++r) {
        T acc = 0;
        JAXEXT_UNROLL_ALL
        for (int j = 0; j < kExtended; ++j) {
          if (kD[r][j] != 0) acc += T(kD[r][j]) * k_[At(j * n + i)];
        }
        f_[At((3 + r) * n + i)] = h * acc;
      }
    }
    dense_ready_ = true;
    return true;
  }

  // The interpolant at t (Dense() done): scipy's Dop853DenseOutput._call_impl, into out[i *
  // stride] (stride 1: an output row; kStride: the workspace).
  JAXEXT_HD_FUNC void DenseAt(T t, T* out, int64_t stride) const {
    const int n = N();
    // (scipy's Dop853DenseOutput divides by t - t_old: the same number, as the step h is itself
    // t_new - t_old, computed so in Attempt as scipy's _step_impl does.)
    const T x = (t - t_old_) / h_;
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < n; ++i) {
      T v = 0;
      JAXEXT_UNROLL_ALL
      for (int r = kDense - 1; r >= 0; --r) {
        v += f_[At(r * n + i)];
        v *= ((kDense - 1 - r) % 2 == 0) ? x : T(1) - x;
      }
      out[i * stride] = v + y_old_[At(i)];
    }
  }

  // g_e on the dense output at t.
  JAXEXT_HD bool EventAt(int e, T t, T* g) {
    if constexpr (kStride == 1) {
      DenseAt(t, scratch_, 1);
      return events_.value(e, t, scratch_, g);
    } else {
      DenseAt(t, row_, 1);
      return events_.value(e, t, row_, g);
    }
  }

  // Brent's method for the root of g_e on [a, b] (a sign change), to 4 eps relative and absolute,
  // scipy's brentq tolerances. Without a sign change on the interpolant, the end with smaller |g|.
  JAXEXT_HD_FUNC bool Root(int e, T a, T b, T* root) {
    T fa, fb;
    if (!EventAt(e, a, &fa) || !EventAt(e, b, &fb)) return false;
    if (fa == T(0)) { *root = a; return true; }
    if (fb == T(0)) { *root = b; return true; }
    if ((fa > 0) == (fb > 0)) {
      *root = fabs(fa) < fabs(fb) ? a : b;
      return true;
    }
    const T tol = T(4) * std::numeric_limits<T>::epsilon();
    T c = a, fc = fa, d = b - a, step_before = d;
    for (int iter = 0; iter < 200; ++iter) {
      if ((fb > 0) == (fc > 0)) {  // keep the root between b and c
        c = a;
        fc = fa;
        d = step_before = b - a;
      }
      if (fabs(fc) < fabs(fb)) {  // b: the best estimate so far
        a = b; b = c; c = a;
        fa = fb; fb = fc; fc = fa;
      }
      const T delta = (tol + tol * fabs(b)) / T(2);
      const T m = (c - b) / T(2);
      if (fabs(m) <= delta || fb == T(0)) break;
      if (fabs(step_before) >= delta && fabs(fa) > fabs(fb)) {
        // Secant (two points) or inverse quadratic interpolation (three).
        const T s = fb / fa;
        T p, q;
        if (a == c) {
          p = T(2) * m * s;
          q = T(1) - s;
        } else {
          const T qa = fa / fc, r = fb / fc;
          p = s * (T(2) * m * qa * (qa - r) - (b - a) * (r - T(1)));
          q = (qa - T(1)) * (r - T(1)) * (s - T(1));
        }
        if (p > 0) q = -q; else p = -p;
        const T limit1 = T(3) * m * q - fabs(delta * q), limit2 = fabs(step_before * q);
        if (T(2) * p < (limit1 < limit2 ? limit1 : limit2)) {
          step_before = d;
          d = p / q;
        } else {
          d = step_before = m;
        }
      } else {
        d = step_before = m;
      }
      a = b;
      fa = fb;
      b += fabs(d) > delta ? d : (m > 0 ? delta : -delta);
      if (!EventAt(e, b, &fb)) return false;
    }
    *root = b;
    return true;
  }

  // scipy's find_active_events and handle_events for the step just accepted.
  JAXEXT_HD_FUNC int32_t HandleEvents(const Outputs<T>& out, bool* terminate) {
    const int n = N();
    const int n_events = events_.size();
    int active[kMaxEvents];
    T roots[kMaxEvents];
    int n_active = 0;
    for (int e = 0; e < n_events; ++e) {
      if (!events_.value(e, t_, Row(y_), &g_new_[At(e)])) return kCallbackFailed;
      const T g = g_old_[At(e)], g_new = g_new_[At(e)];
      const bool up = g <= 0 && g_new >= 0, down = g >= 0 && g_new <= 0;
      const int direction = events_.direction(e);
      if ((direction > 0 && up) || (direction < 0 && down) || (direction == 0 && (up || down))) {
        active[n_active++] = e;
      }
      g_old_[At(e)] = g_new;
    }
    if (n_active == 0) return kSuccess;
    if (!Dense()) return kCallbackFailed;
    bool stop = false;
    for (int a = 0; a < n_active; ++a) {
      const int e = active[a];
      if (!Root(e, t_old_, t_, &roots[a])) return kCallbackFailed;
      if (Reaches(e, out)) stop = true;
    }
    if (stop) {
      // Occurrences in time order up to the first that reaches its terminal count.
      for (int a = 1; a < n_active; ++a) {  // insertion sort (stable), n_active <= kMaxEvents
        const int e = active[a];
        const T r = roots[a];
        int b = a - 1;
        for (; b >= 0 && dir_ * (roots[b] - r) > 0; --b) {
          active[b + 1] = active[b];
          roots[b + 1] = roots[b];
        }
        active[b + 1] = e;
        roots[b + 1] = r;
      }
      for (int a = 0; a < n_active; ++a) {
        const int e = active[a];
        if (Reaches(e, out)) {
          n_active = a + 1;
          break;
        }
      }
    }
    for (int a = 0; a < n_active; ++a) {
      const int e = active[a];
      const int32_t c = out.event_counts[e]++;
      if (c < out.event_slots) {
        out.t_events[e * out.event_slots + c] = roots[a];
        DenseAt(roots[a], out.y_events + (e * out.event_slots + c) * n, 1);
      }
    }
    if (stop) {
      t_ = roots[n_active - 1];
      DenseAt(t_, y_, kStride);
      *terminate = true;
    }
    return kSuccess;
  }

  // Whether this step's occurrence of event e (active) is the one that makes it terminal. Every
  // earlier occurrence has been recorded in event_counts (a step records its occurrences after
  // this is asked, and a step that reaches a terminal count is the last), so no count of our own
  // is kept: a member array indexed by e would keep the whole integrator out of registers on
  // the GPU.
  JAXEXT_HD bool Reaches(int e, const Outputs<T>& out) {
    const int64_t max_count = events_.max_count(e);
    return max_count > 0 && int64_t(out.event_counts[e]) + 1 >= max_count;
  }

  JAXEXT_HD_FUNC int32_t Finish(int32_t status, const Outputs<T>& out) {
    *out.t_final = t_;
    JAXEXT_DOP853_UNROLL
    for (int i = 0; i < N(); ++i) out.y_final[i] = y_[At(i)];
    out.stats[0] = status;
    out.stats[1] = static_cast<int32_t>(steps_);
    out.stats[2] = static_cast<int32_t>(accepted_);
    out.stats[3] = static_cast<int32_t>(nfev_);
    return status;
  }

  Rhs& rhs_;
  Events& events_;
  const int n_, nc_;
  const Settings<T> s_;
  T *k_, *f_, *y_, *y_new_, *y_old_, *tmp_, *scratch_, *g_old_, *g_new_;
  T t_ = 0, t_old_ = 0, h_ = 0, dir_ = 1, t1_ = 0;
  T h_abs_ = 0, ha_ = 0, min_step_ = 0, t_new_ = 0, h_try_ = 0;  // step control between phases
  bool dense_ready_ = false, fresh_ = true, rejected_ = false, nonfinite_trial_ = false;
  int64_t ie_ = 0;  // next t_eval point
  int64_t steps_ = 0, accepted_ = 0, nfev_ = 0;
  // Contiguous copies of a state and its derivative (kStride > 1).
  T row_[kRowSize], f_row_[kRowSize];
};

}  // namespace dop853
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_DOP853_H_
