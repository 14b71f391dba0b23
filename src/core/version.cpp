#include "core/version.h"

#include "scaletrain_version.h"  // generated at build time (cmake/version.cmake)

namespace scaletrain {

namespace {
// The version as one array behind a fixed marker, so that a test can find
// it in the binary and patch it (tests/cli/test_rank_agreement.sh makes
// "another build" so), wherever the linker places it: a bare string literal
// may sit right after another constant, with no NUL byte before it.
constexpr char kMarker[] = "scaletrain-build-version=";
constexpr char kVersionRecord[] = "scaletrain-build-version=" SCALETRAIN_VERSION;
}  // namespace

const char* ScaletrainVersion() { return kVersionRecord + sizeof(kMarker) - 1; }

}  // namespace scaletrain
