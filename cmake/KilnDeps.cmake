# Finds Kiln's dependencies (Debian 12 packages; scripts/install-deps.sh installs them).
#
# Sets KILN_HAVE_CUDA, KILN_WARNINGS, KILN_CPU_FLAGS and KILN_DEFINES (private
# compile definitions of the library and the `kiln` program; `kiln info`
# reports the versions found here).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(ZLIB REQUIRED)
if(NOT KILN_TSAN)
  find_package(dnnl REQUIRED)
  find_package(OpenMP REQUIRED)
  find_package(CLI11 REQUIRED)
  # ONNX import (frontend/formats/onnx/): Debian's libonnx-dev, whose CMake
  # targets (onnx, onnx_proto; they define ONNX_ML and ONNX_NAMESPACE) name
  # protobuf::libprotobuf without finding it, so Protobuf comes first.
  find_package(Protobuf REQUIRED)
  find_package(ONNX REQUIRED)
  # OpenBLAS (libopenblas-openmp-dev): its OpenMP build, by path, so that it
  # shares libgomp's threads with oneDNN whichever BLAS the system's
  # alternatives select (backends/cpu/openblas_gemm.h says what runs on it).
  set(kiln_openblas_dir /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
  find_library(KILN_OPENBLAS_LIBRARY NAMES openblas PATHS ${kiln_openblas_dir} NO_DEFAULT_PATH)
  find_path(KILN_OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp
            NO_DEFAULT_PATH)
  if(NOT KILN_OPENBLAS_LIBRARY OR NOT KILN_OPENBLAS_INCLUDE_DIR)
    message(FATAL_ERROR "OpenBLAS's OpenMP build not found under ${kiln_openblas_dir}: "
                        "install libopenblas-openmp-dev (bash scripts/install-deps.sh)")
  endif()
  add_library(kiln_openblas INTERFACE)
  target_include_directories(kiln_openblas SYSTEM INTERFACE ${KILN_OPENBLAS_INCLUDE_DIR})
  target_link_libraries(kiln_openblas INTERFACE ${KILN_OPENBLAS_LIBRARY})
endif()

set(KILN_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# Vectorize for the machine the code runs on: CI and developer machines are one kind.
set(KILN_CPU_FLAGS -march=native)
set(KILN_DEFINES
  KILN_VERSION="${PROJECT_VERSION}"
  KILN_ONEDNN_VERSION="${dnnl_VERSION}"
  KILN_BUILD_TYPE="${CMAKE_BUILD_TYPE}"
  KILN_COMPILER="${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")

# Reads `#define NAME <number>` from a header into `out` ("" when absent).
function(kiln_header_define header name out)
  file(STRINGS "${header}" line REGEX "^#define[ \t]+${name}[ \t]+[0-9]+")
  string(REGEX REPLACE "^#define[ \t]+${name}[ \t]+([0-9]+).*$" "\\1" value "${line}")
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

# ---- CUDA: AUTO uses the toolkit when found; ON requires it; OFF ignores it.
# Found, the library compiles backends/cuda/ and registers its device backend.
set(KILN_CUDA_VALUES AUTO ON OFF)
set_property(CACHE KILN_CUDA PROPERTY STRINGS ${KILN_CUDA_VALUES})
if(NOT KILN_CUDA IN_LIST KILN_CUDA_VALUES)
  message(FATAL_ERROR "KILN_CUDA='${KILN_CUDA}': expected AUTO, ON or OFF")
endif()
set(KILN_HAVE_CUDA OFF)
if(NOT KILN_CUDA STREQUAL "OFF" AND NOT KILN_TSAN)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(KILN_HAVE_CUDA ON)
    list(APPEND KILN_DEFINES KILN_HAVE_CUDA=1 KILN_CUDA_VERSION="${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
    # cuDNN and NCCL ship as separate packages; on this machine they live under
    # the toolkit's include directory.
    find_path(KILN_CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
    if(KILN_CUDNN_INCLUDE_DIR)
      kiln_header_define(${KILN_CUDNN_INCLUDE_DIR}/cudnn_version.h CUDNN_MAJOR major)
      kiln_header_define(${KILN_CUDNN_INCLUDE_DIR}/cudnn_version.h CUDNN_MINOR minor)
      if(NOT major STREQUAL "")
        set(KILN_CUDNN_VERSION "${major}.${minor}")
        list(APPEND KILN_DEFINES KILN_CUDNN_VERSION="${KILN_CUDNN_VERSION}")
      endif()
    endif()
    find_path(KILN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
    if(KILN_NCCL_INCLUDE_DIR)
      kiln_header_define(${KILN_NCCL_INCLUDE_DIR}/nccl.h NCCL_MAJOR major)
      kiln_header_define(${KILN_NCCL_INCLUDE_DIR}/nccl.h NCCL_MINOR minor)
      if(NOT major STREQUAL "")
        set(KILN_NCCL_VERSION "${major}.${minor}")
        list(APPEND KILN_DEFINES KILN_NCCL_VERSION="${KILN_NCCL_VERSION}")
      endif()
    endif()
    # Optional CUDA libraries: each found one is linked (KILN_CUDA_LIBRARIES) and
    # announced to the CUDA backend's sources as KILN_HAVE_<NAME>=1.
    set(KILN_CUDA_LIBRARIES CUDA::cudart)
    set(KILN_CUDA_DEFINES)
    foreach(lib cublas cublasLt nvrtc)
      if(TARGET CUDA::${lib})
        list(APPEND KILN_CUDA_LIBRARIES CUDA::${lib})
        string(TOUPPER ${lib} upper)
        list(APPEND KILN_CUDA_DEFINES KILN_HAVE_${upper}=1)
      endif()
    endforeach()
    find_library(KILN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(KILN_CUDNN_LIBRARY AND KILN_CUDNN_VERSION)
      list(APPEND KILN_CUDA_LIBRARIES ${KILN_CUDNN_LIBRARY})
      list(APPEND KILN_CUDA_DEFINES KILN_HAVE_CUDNN=1)
    endif()
    # NCCL: its header only. libnccl.so.2 is opened at run time (backends/cuda/nccl_comm.h), so
    # Kiln loads on a GPU machine without it and only the nccl KVStore is then unavailable.
    if(KILN_NCCL_VERSION)
      list(APPEND KILN_CUDA_LIBRARIES ${CMAKE_DL_LIBS})
      list(APPEND KILN_CUDA_DEFINES KILN_HAVE_NCCL=1)
    endif()
    if(NOT "KILN_HAVE_CUBLAS=1" IN_LIST KILN_CUDA_DEFINES)
      message(FATAL_ERROR "CUDA ${CUDAToolkit_VERSION} found without cuBLAS: the CUDA backend needs it (or use -DKILN_CUDA=OFF)")
    endif()
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but the CUDA Toolkit was not found (set CUDAToolkit_ROOT, or use -DKILN_CUDA=OFF)")
  endif()
endif()
if(KILN_HAVE_CUDA)
  # nvcc compiles backends/cuda/*.cu: sm_90 machine code plus PTX (so newer
  # GPUs JIT it), one architecture only, to keep the CI build short.
  # Overridable: -DCMAKE_CUDA_ARCHITECTURES=...
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  if(NOT CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  # C++17: CMake 3.25 does not know nvcc 13's C++20 flag; the .cu files include only
  # backends/cuda/kernels.h, which needs nothing newer.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  string(REPLACE ";" " " cuda_libs "${KILN_CUDA_LIBRARIES}")
  message(STATUS "Kiln: CUDA ${CUDAToolkit_VERSION} (cuDNN ${KILN_CUDNN_VERSION}, NCCL ${KILN_NCCL_VERSION}), "
                 "architectures ${CMAKE_CUDA_ARCHITECTURES}, links ${cuda_libs}")
else()
  message(STATUS "Kiln: CUDA backend OFF")
endif()

# ---- MPI and LLVM: found for `kiln info`; LLVM 14 also builds the fused-elementwise JIT.
if(NOT KILN_TSAN)
  set(MPI_DETERMINE_LIBRARY_VERSION ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(KILN_MPI_VERSION "MPI ${MPI_CXX_VERSION}")
    if(MPI_CXX_LIBRARY_VERSION_STRING MATCHES "^(Open MPI v[0-9.]+|MPICH Version:[ \t]*[0-9.]+)")
      string(REGEX REPLACE "Version:[ \t]*" "" library "${CMAKE_MATCH_1}")
      set(KILN_MPI_VERSION "${library} (MPI ${MPI_CXX_VERSION})")
    endif()
    list(APPEND KILN_DEFINES KILN_MPI_VERSION="${KILN_MPI_VERSION}")
  endif()

  set(KILN_HAVE_LLVM OFF)
  # llvm-config rather than find_package(LLVM): LLVMConfig.cmake needs the C
  # language enabled and imports hundreds of targets nothing links yet.
  find_program(KILN_LLVM_CONFIG NAMES llvm-config-14 llvm-config HINTS /usr/lib/llvm-14/bin)
  if(KILN_LLVM_CONFIG)
    execute_process(COMMAND ${KILN_LLVM_CONFIG} --version OUTPUT_VARIABLE llvm_version
                    OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE llvm_rc)
    if(llvm_rc EQUAL 0 AND llvm_version MATCHES "^14\\.")
      list(APPEND KILN_DEFINES KILN_LLVM_VERSION="${llvm_version}")
      # The fused-elementwise JIT (backends/cpu/jit/) links the shared libLLVM.
      execute_process(COMMAND ${KILN_LLVM_CONFIG} --includedir OUTPUT_VARIABLE llvm_include OUTPUT_STRIP_TRAILING_WHITESPACE)
      execute_process(COMMAND ${KILN_LLVM_CONFIG} --libdir OUTPUT_VARIABLE llvm_libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
      find_library(KILN_LLVM_LIBRARY NAMES LLVM-14 LLVM HINTS ${llvm_libdir} NO_DEFAULT_PATH)
      if(KILN_LLVM AND KILN_LLVM_LIBRARY)
        set(KILN_HAVE_LLVM ON)
        set(KILN_LLVM_INCLUDE_DIR ${llvm_include})
      endif()
    endif()
  endif()
  if(KILN_HAVE_LLVM)
    message(STATUS "Kiln: LLVM ${llvm_version} JIT for fused elementwise ops (${KILN_LLVM_LIBRARY})")
  else()
    message(STATUS "Kiln: LLVM JIT OFF (fused elementwise ops use the interpreter)")
  endif()
endif()
