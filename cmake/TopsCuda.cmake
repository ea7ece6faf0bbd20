# The CUDA backend (src/cuda): built when nvcc is found (TOPS_CUDA=AUTO), always
# (ON: a missing nvcc is an error) or never (OFF).  Without it every other part
# builds unchanged and the tops_cuda_* functions report that CUDA is absent.
#
# Targets: sm_90a (Hopper; wgmma-capable) and sm_80 (Ampere and later through
# the same mma.sync kernels).  Kept to two real targets so CI's 2 cores compile
# the kernels quickly.
set(TOPS_HAVE_CUDA OFF)
if(NOT TOPS_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  # The toolkit often lives outside PATH (CI's environment has CUDA_HOME only).
  if(NOT DEFINED ENV{CUDACXX} AND NOT CMAKE_CUDA_COMPILER)
    find_program(TOPS_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES bin)
    if(TOPS_NVCC)
      set(ENV{CUDACXX} ${TOPS_NVCC})
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # The architectures are given as explicit -gencode flags below.
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TOPS_HAVE_CUDA ON)
  elseif(TOPS_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TOPS_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "tensorops: nvcc not found; building without the CUDA backend")
  endif()
endif()

# The packer is plain C with no CUDA dependency: built always, so its layout
# is tested on machines without nvcc too (tests/unit/test_cuda_pack.c).
list(APPEND TOPS_LIB_SOURCES ${CMAKE_SOURCE_DIR}/src/cuda/pack.c)
if(TOPS_HAVE_CUDA)
  file(GLOB TOPS_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/cuda/*.c)
  list(REMOVE_ITEM TOPS_CUDA_SOURCES ${CMAKE_SOURCE_DIR}/src/cuda/pack.c)
  list(APPEND TOPS_LIB_SOURCES ${TOPS_CUDA_SOURCES})
  # TOPS_CUDA_GENCODE=90a builds the Hopper kernels alone (a device test build in
  # half the compile time); the default keeps both targets.
  set(TOPS_CUDA_GENCODE "90a;80" CACHE STRING "CUDA targets: 90a (sm_90a) and/or 80 (sm_80)")
  set(TOPS_CUDA_FLAGS)
  foreach(arch IN LISTS TOPS_CUDA_GENCODE)
    if(NOT arch MATCHES "^(90a|80)$")
      message(FATAL_ERROR "TOPS_CUDA_GENCODE: '${arch}' is neither 90a nor 80")
    endif()
    list(APPEND TOPS_CUDA_FLAGS -gencode=arch=compute_${arch},code=sm_${arch})
  endforeach()
  list(APPEND TOPS_CUDA_FLAGS
    -Xcompiler=-fvisibility=hidden -Xcompiler=-Wall --expt-relaxed-constexpr)
  if(TOPS_WERROR)
    list(APPEND TOPS_CUDA_FLAGS -Werror=all-warnings)
  endif()
  message(STATUS "tensorops: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
endif()

function(tops_cuda_setup_objects target)
  if(NOT TOPS_HAVE_CUDA)
    return()
  endif()
  target_compile_definitions(${target} PRIVATE TOPS_HAVE_CUDA=1)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${TOPS_CUDA_FLAGS}>)
  target_include_directories(${target} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
endfunction()

# The library links the static runtime, so users need no CUDA libraries at
# run time beyond the driver.
function(tops_cuda_link_libraries shared static)
  if(NOT TOPS_HAVE_CUDA)
    return()
  endif()
  target_link_libraries(${shared} PRIVATE CUDA::cudart_static)
  # Installed static users get the runtime by path (no CUDAToolkit lookup needed).
  target_link_libraries(${static} INTERFACE $<BUILD_INTERFACE:CUDA::cudart_static>
    $<INSTALL_INTERFACE:${CUDA_cudart_static_LIBRARY};dl;rt;stdc++>)
  set(TOPS_PC_CUDA_LIBS "${CUDA_cudart_static_LIBRARY} -ldl -lrt -lstdc++" PARENT_SCOPE)
  set_target_properties(${shared} ${static} PROPERTIES LINKER_LANGUAGE C)
endfunction()

# The CLI's bench times cuBLAS (f16 GEMM, cuBLASLt e4m3) as its GPU baseline.
function(tops_cuda_setup_cli target)
  if(NOT TOPS_HAVE_CUDA)
    return()
  endif()
  target_compile_definitions(${target} PRIVATE TOPS_HAVE_CUDA=1)
  target_include_directories(${target} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE CUDA::cublas CUDA::cublasLt CUDA::cudart_static)
endfunction()
