# What the trainer, the binary and the tests need beyond the planner's
# libraries (included by CMakeLists.txt unless SCALETRAIN_TRAINING is OFF).
find_package(OpenMP REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
# TensorBoard event files (Debian: libprotobuf-dev, protobuf-compiler).
find_package(Protobuf REQUIRED)
# The Prometheus endpoint's HTTP server (libcpp-httplib-dev).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

# OpenBLAS, the OpenMP build: its threads are OpenMP threads, so a BLAS call
# made inside one of our parallel regions runs single-threaded instead of
# oversubscribing the cores. Debian installs it beside the pthread build.
find_library(OPENBLAS_OPENMP_LIB openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(SCALETRAIN_BLAS STREQUAL "onednn")
  find_library(DNNL_LIB dnnl)
  find_path(DNNL_INCLUDE_DIR dnnl.h)
  if(NOT DNNL_LIB OR NOT DNNL_INCLUDE_DIR)
    message(FATAL_ERROR "oneDNN not found: apt-get install libdnnl-dev (or -DSCALETRAIN_BLAS=openblas)")
  endif()
elseif(NOT SCALETRAIN_BLAS STREQUAL "openblas")
  message(FATAL_ERROR "SCALETRAIN_BLAS must be openblas or onednn, got '${SCALETRAIN_BLAS}'")
endif()
if(NOT OPENBLAS_OPENMP_LIB OR NOT OPENBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: apt-get install libopenblas-openmp-dev")
endif()
get_filename_component(OPENBLAS_LIB_DIR ${OPENBLAS_OPENMP_LIB} DIRECTORY)
# Make the loader pick the OpenMP build at run time too, whatever the
# system-wide alternative says.
set(CMAKE_BUILD_RPATH ${OPENBLAS_LIB_DIR})
set(CMAKE_INSTALL_RPATH ${OPENBLAS_LIB_DIR})
