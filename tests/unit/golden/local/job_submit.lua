-- job_submit.lua for Slurm 24.11, rendered by slurmforge from local.yaml; edit the spec, not this file.
--
-- Default pools: slurmctld runs slurm_job_submit for every job sbatch, srun or salloc
-- creates. A job that names no partition goes to
--   ml-gpu (default_gpu_pool gpu) when it asks for GPUs (gpu),
--   ml-cpu (default_cpu_pool cpu) otherwise;
-- a job that names a partition is left alone, and so is every change to a job.

local GPU_PARTITION = "ml-gpu"
local CPU_PARTITION = "ml-cpu"
local GPU_GRES = { ["gpu"] = true }

-- Where a GPU request lands in the job description (Slurm 24.11, job_submit_lua.c):
-- --gpus -> tres_per_job, --gres and --gpus-per-node -> tres_per_node,
-- --gpus-per-socket -> tres_per_socket, --gpus-per-task -> tres_per_task; each a comma
-- separated list such as "gres/gpu:2", "gres/gpu:a100:1" or "cpu=2".
local TRES_FIELDS = { "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task" }

local function asks_for_gpus(job_desc)
   for _, field in ipairs(TRES_FIELDS) do
      local value = job_desc[field]
      if value ~= nil then
         for item in string.gmatch(value, "[^,]+") do
            local name, rest = string.match(item, "^gres[/:]([^:=]+)(.*)$")
            if name ~= nil and GPU_GRES[name] then
               -- a count of 0 asks for none; no count (a type alone) is one
               local count = string.match(rest, "[:=](%d+)$")
               if count == nil or tonumber(count) > 0 then
                  return true
               end
            end
         end
      end
   end
   return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.partition ~= nil and job_desc.partition ~= "" then
      return slurm.SUCCESS
   end
   local partition = CPU_PARTITION
   if asks_for_gpus(job_desc) then
      partition = GPU_PARTITION
   end
   if partition ~= nil then
      job_desc.partition = partition
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
