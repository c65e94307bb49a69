// UR5e peg task: one control period of the 500 Hz joint servo for every member (see simdist/sim/ur5e.py).
// At each physics step: damped least-squares IK from the peg tip to its target, joint targets clipped to the
// servo's reach, first-order servo lag on ctrl, then mj_step. Built at first use by simdist/sim/native.py.

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include <mujoco/mujoco.h>

#define ARM 6  // joints 0..5 are the arm's hinges, actuators 0..5 their position servos

typedef struct {
  const mjModel** models;
  mjData** datas;
  int first, last;  // members [first, last)
  int substeps, tip_site, flange_site;
  const double *target_pos, *target_yaw, *alpha;  // per member: (3), (1), (1)
  double damping, max_step;
  const double *ctrl_low, *ctrl_high;  // (6)
  double* joint_target;                // per member (6), written
} Period;

// dq = J^T (J J^T + damping^2 I)^-1 err, clipped to +-max_step: the joint steps towards the tool target.
static void ik_step(const mjData* d, const Period* p, int i, double dq[ARM]) {
  const double* tip = d->site_xpos + 3 * p->tip_site;
  const double* f = d->site_xmat + 9 * p->flange_site;  // flange rotation, row-major
  double jac[ARM][ARM], err[ARM], a[ARM][ARM];
  for (int j = 0; j < ARM; j++) {
    const double* axis = d->xaxis + 3 * j;
    const double* anchor = d->xanchor + 3 * j;
    double r[3] = {tip[0] - anchor[0], tip[1] - anchor[1], tip[2] - anchor[2]};
    jac[0][j] = axis[1] * r[2] - axis[2] * r[1];
    jac[1][j] = axis[2] * r[0] - axis[0] * r[2];
    jac[2][j] = axis[0] * r[1] - axis[1] * r[0];
    jac[3][j] = axis[0];
    jac[4][j] = axis[1];
    jac[5][j] = axis[2];
  }
  // Orientation error: the skew part of T F^T, T = target yaw times the tool pointing down (as in _ik_steps).
  double c = cos(p->target_yaw[i]), s = sin(p->target_yaw[i]);
  for (int k = 0; k < 3; k++) err[k] = p->target_pos[3 * i + k] - tip[k];
  err[3] = 0.5 * (-f[5] - s * f[6] + c * f[7]);
  err[4] = 0.5 * (c * f[6] + s * f[7] + f[2]);
  err[5] = 0.5 * (s * f[0] - c * f[1] - c * f[3] - s * f[4]);
  // A = J J^T + damping^2 I, symmetric positive definite: Cholesky A = L L^T (L in the lower triangle of a)
  for (int r = 0; r < ARM; r++) {
    for (int k = 0; k <= r; k++) {
      double sum = r == k ? p->damping * p->damping : 0.0;
      for (int j = 0; j < ARM; j++) sum += jac[r][j] * jac[k][j];
      a[r][k] = sum;
    }
  }
  for (int r = 0; r < ARM; r++) {
    for (int k = 0; k <= r; k++) {
      double sum = a[r][k];
      for (int j = 0; j < k; j++) sum -= a[r][j] * a[k][j];
      a[r][k] = r == k ? sqrt(sum) : sum / a[k][k];
    }
  }
  double y[ARM];  // solve L L^T y = err
  for (int r = 0; r < ARM; r++) {
    double sum = err[r];
    for (int j = 0; j < r; j++) sum -= a[r][j] * y[j];
    y[r] = sum / a[r][r];
  }
  for (int r = ARM - 1; r >= 0; r--) {
    double sum = y[r];
    for (int j = r + 1; j < ARM; j++) sum -= a[j][r] * y[j];
    y[r] = sum / a[r][r];
  }
  for (int j = 0; j < ARM; j++) {
    double sum = 0.0;
    for (int r = 0; r < ARM; r++) sum += jac[r][j] * y[r];
    dq[j] = fmin(fmax(sum, -p->max_step), p->max_step);
  }
}

static void* run_members(void* arg) {
  const Period* p = arg;
  for (int i = p->first; i < p->last; i++) {
    const mjModel* m = p->models[i];
    mjData* d = p->datas[i];
    double* target = p->joint_target + ARM * i;
    double dq[ARM];
    mj_kinematics(m, d);  // then each step leaves the kinematics of the position it started from
    for (int step = 0; step < p->substeps; step++) {
      ik_step(d, p, i, dq);
      for (int j = 0; j < ARM; j++) {
        target[j] = fmin(fmax(d->qpos[j] + dq[j], p->ctrl_low[j]), p->ctrl_high[j]);
        d->ctrl[j] += p->alpha[i] * (target[j] - d->ctrl[j]);
      }
      mj_step(m, d);
    }
  }
  return NULL;
}

// Advance members 0..n-1 by one control period, split over nthread threads (1: the calling thread only; a
// thread that cannot be started leaves its members to the calling thread).
void peg_servo_period(int n, const mjModel** models, mjData** datas, int substeps, int nthread, int tip_site,
                      int flange_site, const double* target_pos, const double* target_yaw, const double* alpha,
                      double damping, double max_step, const double* ctrl_low, const double* ctrl_high,
                      double* joint_target) {
  Period base = {models, datas, 0, n, substeps, tip_site, flange_site, target_pos, target_yaw, alpha,
                 damping, max_step, ctrl_low, ctrl_high, joint_target};
  if (nthread < 1) nthread = 1;
  if (nthread > n) nthread = n > 0 ? n : 1;
  Period parts[nthread];
  pthread_t threads[nthread];
  int started[nthread];
  for (int t = 0; t < nthread; t++) {
    parts[t] = base;
    parts[t].first = n * t / nthread;
    parts[t].last = n * (t + 1) / nthread;
    started[t] = t > 0 && pthread_create(&threads[t], NULL, run_members, &parts[t]) == 0;
  }
  for (int t = 0; t < nthread; t++) {
    if (!started[t]) run_members(&parts[t]);
  }
  for (int t = 1; t < nthread; t++) {
    if (started[t]) pthread_join(threads[t], NULL);
  }
}

// Member i's start pose: `iterations` IK steps on kinematics alone (no dynamics), moving qpos itself.
void peg_servo_start_pose(const mjModel* m, mjData* d, int i, int iterations, int tip_site, int flange_site,
                          const double* target_pos, const double* target_yaw, double damping, double max_step) {
  Period p = {.tip_site = tip_site, .flange_site = flange_site, .target_pos = target_pos,
              .target_yaw = target_yaw, .damping = damping, .max_step = max_step};
  double dq[ARM];
  for (int k = 0; k < iterations; k++) {
    mj_kinematics(m, d);
    ik_step(d, &p, i, dq);
    for (int j = 0; j < ARM; j++) d->qpos[j] += dq[j];
  }
}
