#!/bin/bash
exec 2>&1
set -x
mdadm --create /dev/md0 --run --assume-clean --metadata=1.2 --level=5 --raid-devices=4 --chunk=64 --layout=left-symmetric \
  --uuid=11111111:22222222:33333333:44444444 --name=r5 --homehost=testhost /dev/vda /dev/vdb /dev/vdc /dev/vdd
mdadm --create /dev/md1 --run --assume-clean --metadata=1.0 --level=1 --raid-devices=2 --bitmap=internal \
  --uuid=55555555:66666666:77777777:88888888 --name=r1b --homehost=testhost /dev/vde /dev/vdf
mdadm --create /dev/md2 --run --assume-clean --metadata=1.1 --level=1 --raid-devices=2 \
  --uuid=99999999:aaaaaaaa:bbbbbbbb:cccccccc --name=r11 --homehost=testhost /dev/vdg /dev/vdh
mdadm --create /dev/md3 --run --assume-clean --metadata=0.90 --level=5 --raid-devices=4 --chunk=64 \
  --uuid=dddddddd:eeeeeeee:ffffffff:01234567 --homehost=testhost /dev/vdi /dev/vdj /dev/vdk /dev/vdl
mdadm --create /dev/md4 --run --assume-clean --metadata=1.2 --level=1 --raid-devices=2 --bitmap=internal \
  --uuid=0badc0de:00000000:00000000:00000012 --name=r12b --homehost=testhost /dev/vdm /dev/vdn
cat /proc/mdstat
mdadm --stop /dev/md0 /dev/md1 /dev/md2 /dev/md3 /dev/md4
set +x
for d in vda vde vdf vdg vdi vdm; do mdadm --examine /dev/$d > /share/$d.examine.txt; done
mdadm -X /dev/vde > /share/vde.bitmap.txt
mdadm -X /dev/vdm > /share/vdm.bitmap.txt
