#define _GNU_SOURCE
#include "CBlueZ.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>
#include <bluetooth/l2cap.h>

int cbluez_hci_socket(void) {
    return socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI);
}

int cbluez_hci_bind(int fd, uint16_t dev, uint16_t channel) {
    struct sockaddr_hci a;
    memset(&a, 0, sizeof a);
    a.hci_family = AF_BLUETOOTH;
    a.hci_dev = dev;
    a.hci_channel = channel;
    return bind(fd, (struct sockaddr *)&a, sizeof a);
}

int cbluez_hci_set_filter_all(int fd) {
    struct hci_filter f;
    hci_filter_clear(&f);
    hci_filter_all_ptypes(&f);
    hci_filter_all_events(&f);
    return setsockopt(fd, SOL_HCI, HCI_FILTER, &f, sizeof f);
}

int cbluez_hci_dev_list(int fd, uint16_t *ids, int max) {
    if (max <= 0 || max > HCI_MAX_DEV) max = HCI_MAX_DEV;
    size_t size = sizeof(struct hci_dev_list_req) + (size_t)max * sizeof(struct hci_dev_req);
    struct hci_dev_list_req *req = calloc(1, size);
    if (!req) { errno = ENOMEM; return -1; }
    req->dev_num = (uint16_t)max;
    if (ioctl(fd, HCIGETDEVLIST, req) < 0) {
        int e = errno;
        free(req);
        errno = e;
        return -1;
    }
    int n = req->dev_num;
    for (int i = 0; i < n && i < max; i++) ids[i] = req->dev_req[i].dev_id;
    free(req);
    return n;
}

int cbluez_hci_dev_info(int fd, uint16_t dev, cbluez_dev_info *out) {
    struct hci_dev_info di;
    memset(&di, 0, sizeof di);
    di.dev_id = dev;
    if (ioctl(fd, HCIGETDEVINFO, &di) < 0) return -1;
    memset(out, 0, sizeof *out);
    out->dev_id = di.dev_id;
    memcpy(out->name, di.name, sizeof out->name - 1);
    memcpy(out->bdaddr, di.bdaddr.b, 6);
    out->flags = di.flags;
    out->type = di.type;
    out->acl_mtu = di.acl_mtu;
    out->acl_pkts = di.acl_pkts;
    return 0;
}

int cbluez_hci_dev_up(int fd, uint16_t dev) { return ioctl(fd, HCIDEVUP, (unsigned long)dev); }
int cbluez_hci_dev_down(int fd, uint16_t dev) { return ioctl(fd, HCIDEVDOWN, (unsigned long)dev); }

int cbluez_l2cap_socket(void) {
    return socket(AF_BLUETOOTH, SOCK_SEQPACKET | SOCK_CLOEXEC, BTPROTO_L2CAP);
}

static void fill_l2(struct sockaddr_l2 *a, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t psm, uint16_t cid) {
    memset(a, 0, sizeof *a);
    a->l2_family = AF_BLUETOOTH;
    a->l2_psm = htobs(psm);
    memcpy(a->l2_bdaddr.b, bdaddr, 6);
    a->l2_cid = htobs(cid);
    a->l2_bdaddr_type = addr_type;
}

int cbluez_l2cap_bind(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t cid) {
    struct sockaddr_l2 a;
    fill_l2(&a, bdaddr, addr_type, 0, cid);
    return bind(fd, (struct sockaddr *)&a, sizeof a);
}

int cbluez_l2cap_connect(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t cid) {
    struct sockaddr_l2 a;
    fill_l2(&a, bdaddr, addr_type, 0, cid);
    return connect(fd, (struct sockaddr *)&a, sizeof a);
}

int cbluez_l2cap_bind_psm(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t psm) {
    struct sockaddr_l2 a;
    fill_l2(&a, bdaddr, addr_type, psm, 0);
    return bind(fd, (struct sockaddr *)&a, sizeof a);
}

int cbluez_l2cap_connect_psm(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t psm) {
    struct sockaddr_l2 a;
    fill_l2(&a, bdaddr, addr_type, psm, 0);
    return connect(fd, (struct sockaddr *)&a, sizeof a);
}

int cbluez_l2cap_set_mode(int fd, uint8_t mode) {
    return setsockopt(fd, SOL_BLUETOOTH, BT_MODE, &mode, sizeof mode);
}

int cbluez_l2cap_set_receive_mtu(int fd, uint16_t mtu) {
    return setsockopt(fd, SOL_BLUETOOTH, BT_RCVMTU, &mtu, sizeof mtu);
}

int cbluez_l2cap_mtus(int fd, uint16_t *send_mtu, uint16_t *receive_mtu) {
    socklen_t len = sizeof *send_mtu;
    if (getsockopt(fd, SOL_BLUETOOTH, BT_SNDMTU, send_mtu, &len) < 0) return -1;
    len = sizeof *receive_mtu;
    return getsockopt(fd, SOL_BLUETOOTH, BT_RCVMTU, receive_mtu, &len);
}

int cbluez_l2cap_set_security(int fd, uint8_t level, uint8_t key_size) {
    struct bt_security sec;
    memset(&sec, 0, sizeof sec);
    sec.level = level;
    sec.key_size = key_size;
    return setsockopt(fd, SOL_BLUETOOTH, BT_SECURITY, &sec, sizeof sec);
}

int cbluez_l2cap_security(int fd, uint8_t *level, uint8_t *key_size) {
    struct bt_security sec;
    socklen_t len = sizeof sec;
    memset(&sec, 0, sizeof sec);
    if (getsockopt(fd, SOL_BLUETOOTH, BT_SECURITY, &sec, &len) < 0) return -1;
    *level = sec.level;
    *key_size = sec.key_size;
    return 0;
}

int cbluez_l2cap_accept(int fd, uint8_t bdaddr_out[6], uint8_t *addr_type_out) {
    struct sockaddr_l2 a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    int c = accept4(fd, (struct sockaddr *)&a, &len, SOCK_CLOEXEC);
    if (c < 0) return -1;
    memcpy(bdaddr_out, a.l2_bdaddr.b, 6);
    *addr_type_out = a.l2_bdaddr_type;
    return c;
}
