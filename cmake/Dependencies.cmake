# Every dependency comes from Debian (scripts/bootstrap.sh installs them) or, on the GPU
# machine, from its system-wide installs. Keep this portable between CMake 3.25 and 4.x.
find_package(Threads REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(nlohmann_json 3 REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 QUIET CONFIG)
if(NOT TARGET CLI11::CLI11)
  # Some distributions ship only the header without a CMake package.
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${CLI11_INCLUDE_DIR})
endif()
find_package(OpenSSL REQUIRED)
find_package(HDF5 REQUIRED COMPONENTS C)

# OpenBLAS + LAPACKE (eigen decompositions for PCA, least squares).
find_package(BLAS REQUIRED)
find_package(LAPACK REQUIRED)
find_library(LAPACKE_LIBRARY NAMES lapacke REQUIRED)
find_path(LAPACKE_INCLUDE_DIR NAMES lapacke.h PATH_SUFFIXES openblas REQUIRED)
add_library(mla_lapacke INTERFACE)
target_link_libraries(mla_lapacke INTERFACE ${LAPACKE_LIBRARY} ${LAPACK_LIBRARIES} ${BLAS_LIBRARIES})
target_include_directories(mla_lapacke INTERFACE ${LAPACKE_INCLUDE_DIR})

add_library(mla_hdf5 INTERFACE)
target_link_libraries(mla_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_include_directories(mla_hdf5 INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_compile_definitions(mla_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

if(MLA_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark QUIET)
endif()

# NCCL (ranks on several GPUs: verify-decode --devices, mla-bench --tp): optional. Searched under
# NCCL_ROOT (CMake or environment variable; e.g. a pip wheel's site-packages/nvidia/nccl) and
# beside the CUDA toolkit. Without it everything builds, and --devices runs the CPU stand-in only.
set(MLA_HAVE_NCCL OFF)
if(MLA_ENABLE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(MLA_HAVE_NCCL ON)
    add_library(mla_nccl INTERFACE)
    target_include_directories(mla_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(mla_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
    target_compile_definitions(mla_nccl INTERFACE MLA_HAVE_NCCL=1)
    message(STATUS "NCCL: ${NCCL_LIBRARY} (headers ${NCCL_INCLUDE_DIR})")
  else()
    message(STATUS "NCCL not found (set NCCL_ROOT): multi-GPU ranks off, CPU stand-in only")
  endif()
endif()
