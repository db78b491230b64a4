#!/bin/bash
# Guest script for mdref-run: examine, assemble and scrub raidkit-encoded images.
# Host side (images from `RAIDKIT_FORMAT_IMG_DIR=DIR cargo test -p raidkit-format
#   --test format accept::write_images -- --ignored`):
#   cd DIR && mdref-run -q --snapshot -d r5_0.img -d r5_1.img -d r5_2.img -d r5_3.img \
#     -d r1b_0.img -d r1b_1.img -d r11_0.img -d r11_1.img -d g90_0.img -d g90_1.img \
#     -d g90_2.img -d g90_3.img -d ex2.img run.sh > result.txt
exec 2>&1
names=(r5_0 r5_1 r5_2 r5_3 r1b_0 r1b_1 r11_0 r11_1 g90_0 g90_1 g90_2 g90_3 ex2)
i=0
for d in $MDREF_DISKS; do
  echo "=== examine ${names[$i]}.img"
  mdadm --examine $d
  i=$((i+1))
done
echo "=== assemble"
ok=0
mdadm --assemble /dev/md0 /dev/vda /dev/vdb /dev/vdc /dev/vdd && ok=$((ok+1))
mdadm --assemble /dev/md1 /dev/vde /dev/vdf && ok=$((ok+1))
mdadm --assemble /dev/md2 /dev/vdg /dev/vdh && ok=$((ok+1))
mdadm --assemble /dev/md3 /dev/vdi /dev/vdj /dev/vdk /dev/vdl && ok=$((ok+1))
cat /proc/mdstat
for md in md0 md1 md2 md3; do
  echo check > /sys/block/$md/md/sync_action
done
mdref-wait md0 md1 md2 md3
for md in md0 md1 md2 md3; do
  echo "$md mismatch_cnt=$(cat /sys/block/$md/md/mismatch_cnt)"
  mdadm --detail /dev/$md | grep -E 'Version|Raid Level|Array Size|State :|UUID|Name'
done
[ $ok = 4 ] && echo ALL-ASSEMBLED
