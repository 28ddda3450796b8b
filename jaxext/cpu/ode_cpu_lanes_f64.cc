// jaxext.ode.dop853's built-in models in SIMD lanes, double (ode_cpu_internal.h).
#include "jaxext/cpu/ode_cpu_internal.h"

namespace jaxext {
namespace cpu {
namespace ode_internal {

JAXEXT_ODE_LANES_DEFINE(double, F64)

}  // namespace ode_internal
}  // namespace cpu
}  // namespace jaxext
