# The GPU calibration (bench/gpu_calibrate.sh builds and runs it; it writes a
# [calibration.GPU] file for `scaletrain plan --hardware`). Included by the
# top-level CMakeLists.txt with SCALETRAIN_CUDA, also without the training
# stack (SCALETRAIN_TRAINING=OFF: no MPI, OpenMP or BLAS needed on the GPU
# machine): it links only the planner and the CUDA kernels. Measuring needs a
# GPU; building does not.
if(TARGET st_kernels_cuda AND TARGET st_plan)
  add_executable(gpu_calibrate ${PROJECT_SOURCE_DIR}/bench/gpu_calibrate.cpp
                 ${PROJECT_SOURCE_DIR}/bench/gpu_calibrate_measure.cu)
  target_include_directories(gpu_calibrate PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(gpu_calibrate PRIVATE st_plan st_kernels_cuda CLI11::CLI11 CUDA::cublasLt CUDA::cudart)
  set_target_properties(gpu_calibrate PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON
                        RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  # As st_kernels_cuda: the directory's g++ flags for the C++ file only,
  # warnings to nvcc's host compiler for the CUDA one.
  get_property(ST_TOP_OPTIONS DIRECTORY PROPERTY COMPILE_OPTIONS)
  set(ST_GPUCAL_OPTIONS "")
  foreach(opt ${ST_TOP_OPTIONS})
    list(APPEND ST_GPUCAL_OPTIONS "$<$<COMPILE_LANGUAGE:CXX>:${opt}>")
  endforeach()
  set_property(TARGET gpu_calibrate PROPERTY COMPILE_OPTIONS ${ST_GPUCAL_OPTIONS})
  target_compile_options(gpu_calibrate PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>")
  if(SCALETRAIN_WERROR)
    target_compile_options(gpu_calibrate PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings;-Xcompiler=-Werror>")
  endif()
endif()
