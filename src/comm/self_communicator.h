// The "self" backend: a group of one rank. Collectives are local copies (or
// nothing), complete at once, and are counted like any other backend's, so
// a single-process run reports the same payload figures as a distributed one.
// There is no peer to send to: send/recv fail.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace scaletrain {

std::unique_ptr<Communicator> CreateSelfCommunicator(const std::string& name);

}  // namespace scaletrain
