#include "core/version.h"

#include "scaletrain_version.h"  // generated at build time (cmake/version.cmake)

namespace scaletrain {

const char* ScaletrainVersion() { return SCALETRAIN_VERSION; }

}  // namespace scaletrain
