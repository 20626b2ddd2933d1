# SPDX-License-Identifier: BSD-3-Clause
# KVC_CHECK_BASH_COMPLETION: where `make install` puts the bash completion of kvcore
# (contrib/bash-completion/kvcore), as bashcompletiondir; --without-bash-completion-dir installs none.
# The default is bash-completion's own completions directory rebased onto kvcore's prefix
# (PREFIX/share/bash-completion/completions, which bash-completion searches through XDG_DATA_DIRS
# for /usr and /usr/local): the system's /usr/share/... would be outside a --prefix install, a
# DESTDIR staging and make distcheck.
AC_DEFUN([KVC_CHECK_BASH_COMPLETION], [
  AC_ARG_WITH([bash-completion-dir],
    [AS_HELP_STRING([--with-bash-completion-dir=DIR],
      [install the bash completion of kvcore in DIR (default: bash-completion's completions directory under PREFIX, PREFIX/share/bash-completion/completions); --without-bash-completion-dir installs none])],
    [], [with_bash_completion_dir=yes])
  AS_CASE([$with_bash_completion_dir],
    [no], [bashcompletiondir=],
    [yes], [bashcompletiondir=`$PKG_CONFIG --define-variable=prefix='${prefix}' --define-variable=datadir='${datadir}' --variable=completionsdir bash-completion 2>/dev/null`
            AS_CASE([$bashcompletiondir], ['${prefix}'/* | '${datadir}'/*], [],
                    [bashcompletiondir='${datadir}/bash-completion/completions'])],
    [bashcompletiondir=$with_bash_completion_dir])
  AC_SUBST([bashcompletiondir])
  AM_CONDITIONAL([KVC_BASH_COMPLETION], [test -n "$bashcompletiondir"])
  AS_IF([test -n "$bashcompletiondir"],
        [KVC_EXPAND_DIR([kvc_bashcompletiondir_x], [$bashcompletiondir])
         KVC_SUMMARY_ADD([bash completion], [$kvc_bashcompletiondir_x])],
        [KVC_SUMMARY_ADD([bash completion], [no (--without-bash-completion-dir)])])
])
