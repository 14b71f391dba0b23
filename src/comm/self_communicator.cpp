#include "comm/self_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/comm_state.h"

namespace scaletrain {
namespace {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : Communicator(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "self"; }

  Result<std::unique_ptr<Communicator>> SplitImpl(int color, int key,
                                                  const std::string& name) override {
    return CreateSelfCommunicator(name);
  }

  Result<std::unique_ptr<Communicator>> SplitByHostImpl(const std::string& name) override {
    return CreateSelfCommunicator(name);
  }

  [[noreturn]] void Abort(int exit_code) override {
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }

 protected:
  void Start(const OpDesc& op, const std::shared_ptr<internal::CommState>& state) override {
    state->MarkStarted();
    const size_t bytes = static_cast<size_t>(op.count * CommDTypeSize(op.dtype));
    switch (op.op) {
      case CommOp::kAllreduce:
      case CommOp::kBroadcast:
      case CommOp::kBarrier:
        // The sum, and the average, of one contribution is itself.
        break;
      case CommOp::kReduceScatter:
      case CommOp::kAllgather:
        // One block: the output is the input. In place there is nothing to do.
        if (op.send != nullptr && bytes > 0) std::memcpy(op.recv, op.send, bytes);
        break;
      case CommOp::kSend:
      case CommOp::kRecv:
        state->Complete(
            FailedPrecondition("a group of one rank has no peer to exchange messages with"));
        return;
    }
    state->Complete(Status::Ok());
  }
};

}  // namespace

std::unique_ptr<Communicator> CreateSelfCommunicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

}  // namespace scaletrain
