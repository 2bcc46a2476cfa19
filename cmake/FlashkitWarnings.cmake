# Warnings for flashkit's own targets (never for third-party code).
function(flashkit_warnings target)
  set(cxx_flags -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic)
  if(FLASHKIT_WERROR)
    list(APPEND cxx_flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${cxx_flags}>)
  if(FLASHKIT_HAVE_CUDA)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
      $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${FLASHKIT_WERROR}>>:-Werror=all-warnings>)
  endif()
endfunction()
