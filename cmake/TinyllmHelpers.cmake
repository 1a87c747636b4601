# Warnings are errors on our own targets only, never on a consumer's.
function(tinyllm_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()
