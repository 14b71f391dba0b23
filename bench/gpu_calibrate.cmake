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
  set_target_properties(gpu_calibrate PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  st_cuda_target_options(gpu_calibrate)  # src/CMakeLists.txt
endif()
