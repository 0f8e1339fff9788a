// CBlueZ: the only C in the stack. It exposes what Swift cannot import well from
// libbluetooth-dev's headers: the sockaddr structs for HCI and L2CAP sockets, the
// HCI ioctls and the HCI filter socket option. Every function returns -1 and leaves
// errno set on failure; the Swift side (Transports/BlueZ*.swift) turns errno into
// an error a person can act on.
#ifndef CBLUEZ_H
#define CBLUEZ_H

#include <stdint.h>

enum {
    CBLUEZ_HCI_CHANNEL_RAW = 0,
    CBLUEZ_HCI_CHANNEL_USER = 1,
    CBLUEZ_HCI_CHANNEL_MONITOR = 2,
    CBLUEZ_HCI_DEV_NONE = 0xffff,
    CBLUEZ_L2CAP_CID_ATT = 0x0004,
    CBLUEZ_BDADDR_BREDR = 0x00,
    CBLUEZ_BDADDR_LE_PUBLIC = 0x01,
    CBLUEZ_BDADDR_LE_RANDOM = 0x02,
};

typedef struct {
    uint16_t dev_id;
    char name[8];
    uint8_t bdaddr[6];   // wire order (least significant octet first)
    uint32_t flags;      // HCI_UP = bit 0, HCI_INIT = 1, HCI_RUNNING = 2, ...
    uint8_t type;        // bus in low nibble, controller type in bits 4-5
    uint16_t acl_mtu;
    uint16_t acl_pkts;
} cbluez_dev_info;

/// socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI)
int cbluez_hci_socket(void);
/// bind to (dev, channel); channel is CBLUEZ_HCI_CHANNEL_*.
int cbluez_hci_bind(int fd, uint16_t dev, uint16_t channel);
/// Raw channel only: pass every packet type and every event to this socket.
int cbluez_hci_set_filter_all(int fd);
/// HCIGETDEVLIST on a control socket: fills ids (up to max), returns the count.
int cbluez_hci_dev_list(int fd, uint16_t *ids, int max);
/// HCIGETDEVINFO.
int cbluez_hci_dev_info(int fd, uint16_t dev, cbluez_dev_info *out);
/// HCIDEVUP / HCIDEVDOWN.
int cbluez_hci_dev_up(int fd, uint16_t dev);
int cbluez_hci_dev_down(int fd, uint16_t dev);

/// socket(AF_BLUETOOTH, SOCK_SEQPACKET | SOCK_CLOEXEC, BTPROTO_L2CAP)
int cbluez_l2cap_socket(void);
/// bind / connect a sockaddr_l2 with psm 0, the given address (wire order), LE address
/// type (CBLUEZ_BDADDR_*) and fixed channel id (CBLUEZ_L2CAP_CID_ATT for ATT).
int cbluez_l2cap_bind(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t cid);
int cbluez_l2cap_connect(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t cid);
/// accept(), returning the peer's address and type.
int cbluez_l2cap_accept(int fd, uint8_t bdaddr_out[6], uint8_t *addr_type_out);

/* Connection-oriented channels (LE credit-based, enhanced credit-based) on an SPSM. */
enum {
    CBLUEZ_BT_MODE_LE_FLOWCTL = 0x03,
    CBLUEZ_BT_MODE_EXT_FLOWCTL = 0x04,
};
int cbluez_l2cap_bind_psm(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t psm);
int cbluez_l2cap_connect_psm(int fd, const uint8_t bdaddr[6], uint8_t addr_type, uint16_t psm);
int cbluez_l2cap_set_mode(int fd, uint8_t mode);
int cbluez_l2cap_set_receive_mtu(int fd, uint16_t mtu);
int cbluez_l2cap_mtus(int fd, uint16_t *send_mtu, uint16_t *receive_mtu);
int cbluez_l2cap_set_security(int fd, uint8_t level, uint8_t key_size);
/// BT_SECURITY as the kernel reports it: on a connected socket, the link's level now
/// (1 low, 2 medium: encrypted, 3 high: authenticated, 4 FIPS) and its key size.
int cbluez_l2cap_security(int fd, uint8_t *level, uint8_t *key_size);

#endif
