-- apps/tools/1.0: written by slurmforge from modules/apps/tools/1.0.yaml (sha256:f1088efa587078b7ac2c2930753e423677e8ad13ade9d9763e104f3668755659).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
apps/tools/1.0: installed from /srv/tools-1.0
]])

whatis("Name: tools")
whatis("Version: 1.0")
whatis("Description: installed from /srv/tools-1.0")

local root = "/opt/software/modules/install/apps/tools/1.0"

append_path("MANPATH", pathJoin(root, "share/man"))
append_path("MANPATH", "/usr/share/man")

-- deprecated: hidden from `module avail` by the .modulerc.lua next to this file, still loadable
if (mode() == "load") then
    LmodMessage("apps/tools/1.0 is deprecated: it still loads, but it is hidden from 'module avail' and will be removed. See 'module spider apps/tools' for newer versions.")
end
