-- SPDX-License-Identifier: BSD-3-Clause
-- Lmod module file for kvcore 0.1.0: copy it to $MODULEPATH/kvcore/0.1.0.lua and set root to the
-- install prefix (docs/PACKAGING.md). tests/shell/test_modulefiles.sh loads it with Lmod.
local root = "/opt/apps/kvcore/0.1.0"
whatis("kvcore 0.1.0: KV-cache kernels for LLM serving (library, CLI, Python package)")
-- hwloc, SLEEF and zlib usually come from the system; load hwloc where the site has it as a module
-- (loading an unknown module would make this one fail).
if isAvail("hwloc") then
    load("hwloc")
end
prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "lib"))
prepend_path("PKG_CONFIG_PATH", pathJoin(root, "lib/pkgconfig"))
prepend_path("CMAKE_PREFIX_PATH", root)
prepend_path("MANPATH", pathJoin(root, "share/man"))
append_path("MANPATH", "")   -- an empty entry: man still searches its default directories
-- The Python package: automake installs it under lib/python3.X/site-packages (dist-packages for
-- Debian's python3 under /usr/local); add whichever this install has.
for minor = 7, 30 do
    for _, dir in ipairs({"site-packages", "dist-packages"}) do
        local p = pathJoin(root, "lib", "python3." .. minor, dir)
        if isDir(p) then
            prepend_path("PYTHONPATH", p)
        end
    end
end
