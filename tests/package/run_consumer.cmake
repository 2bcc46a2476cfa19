# Installs the build tree to a scratch prefix, extracts the README's C++ example, and builds and
# runs it as a separate project that uses find_package(flashkit).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)

# The example is the ```cpp block that follows the <!-- readme-example --> marker.
file(READ ${README} readme)
string(FIND "${readme}" "<!-- readme-example -->" marker)
if(marker EQUAL -1)
  message(FATAL_ERROR "README.md has no <!-- readme-example --> marker")
endif()
string(SUBSTRING "${readme}" ${marker} -1 rest)
string(FIND "${rest}" "```cpp\n" open)
string(FIND "${rest}" "\n```\n" close)
math(EXPR begin "${open} + 7")
math(EXPR length "${close} - ${begin} + 1")
string(SUBSTRING "${rest}" ${begin} ${length} example)
file(WRITE ${WORK_DIR}/readme_example.cpp "${example}")

run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DEXAMPLE_SOURCE=${WORK_DIR}/readme_example.cpp)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/readme_example)
if(NOT last_output MATCHES "out\\[0\\] = ")
  message(FATAL_ERROR "the README example printed something else:\n${last_output}")
endif()
message(STATUS "README example output: ${last_output}")
