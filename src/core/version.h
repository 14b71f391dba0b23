// The build's version: `git describe --always --dirty` of the source tree at
// build time ("unknown" outside a git checkout). `scaletrain --version`
// prints it; the ranks of one job check that they all run the same one.
#pragma once

namespace scaletrain {

const char* ScaletrainVersion();

}  // namespace scaletrain
