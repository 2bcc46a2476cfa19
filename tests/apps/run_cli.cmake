# Runs the flashkit command and checks its exit code and output, for tests that a plain add_test
# cannot express (a given non-zero exit code, a message on stderr).
#   cmake -DEXE=<flashkit> -DARGS="bench|--n|abc" -DRC=2 [-DSTDOUT=<regex>] [-DSTDERR=<regex>]
#         -P run_cli.cmake
# ARGS separates the arguments with "|", since add_test would split a ";" list itself.
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(cmd "flashkit ${args}")
if(NOT rc STREQUAL RC)
  message(FATAL_ERROR "${cmd}: exit code ${rc}, expected ${RC}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED STDOUT AND NOT out MATCHES "${STDOUT}")
  message(FATAL_ERROR "${cmd}: stdout does not match '${STDOUT}':\n${out}")
endif()
if(DEFINED STDERR AND NOT err MATCHES "${STDERR}")
  message(FATAL_ERROR "${cmd}: stderr does not match '${STDERR}':\n${err}")
endif()
