#include "core/dtype.h"

namespace scaletrain {

size_t DTypeSizeBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
  }
  return "?";
}

Result<DType> DTypeFromName(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32,
                  DType::kI64, DType::kU8}) {
    if (DTypeName(t) == name) return t;
  }
  return InvalidArgument("unknown dtype '" + std::string(name) +
                         "'; expected one of F32, F64, BF16, F16, I32, I64, U8");
}

}  // namespace scaletrain
