// Element types. The dtype is a property of a tensor (not of the program), so
// bf16 on GPUs can come without touching layer code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace scaletrain {

enum class DType { kF32, kF64, kBF16, kF16, kI32, kI64, kU8 };

size_t DTypeSizeBytes(DType t);
// Names as the safetensors format spells them ("F32", "BF16", "I32", ...).
std::string_view DTypeName(DType t);
Result<DType> DTypeFromName(std::string_view name);

}  // namespace scaletrain
